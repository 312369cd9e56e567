#!/usr/bin/env bash
# Model checks of the queue protocol (model/queue.pml) and of the cache's
# pin-free validated read against eviction, through the directory and through a
# page hint (model/slot.pml). The protocol must pass
# in each configuration, and each deliberately broken variant must fail
# (otherwise the model would check nothing). Needs spin and a C compiler;
# about a minute and 1 GB of memory per configuration.
set -uo pipefail
cd "$(dirname "$0")"
command -v spin >/dev/null || { echo "model/check.sh: spin is not installed"; exit 1; }
model=$PWD/queue.pml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
verify() {  # name spin-defines... : prints a verdict; returns 0 if no error was found
  local name=$1; shift
  ( cd "$work" && rm -f pan pan.* ./*.trail && spin -a "$@" "$model" >/dev/null &&
    cc -O2 -DCOLLAPSE -DVECTORSZ=4096 -DMEMLIM=4000 -o pan pan.c 2>/dev/null &&
    timeout 300 ./pan -m100000 >"$name.out" 2>&1 ) || true
  local errors states
  errors=$(awk '/errors:/{print $NF}' "$work/$name.out" 2>/dev/null | tail -1)
  states=$(awk '/states, stored/{print $1}' "$work/$name.out" 2>/dev/null | head -1)
  echo "  $name: errors=${errors:-?} states=${states:-?}"
  if [ -z "$errors" ] || grep -q "max search depth too small\|out of memory" "$work/$name.out"; then
    echo "  $name: the verifier did not finish"; return 2
  fi
  [ "$errors" = 0 ]
}
status=0
echo "protocol (must pass):"
verify reorder-2x2 -DN=4 -DCLIENTS=2 -DK=2 || status=1
verify wrap-2x3 -DN=2 -DCLIENTS=2 -DK=3 || status=1
verify greedy-client -DN=2 -DCLIENTS=2 -DK=3 -DGREEDY || status=1
verify two-outstanding -DN=4 -DCLIENTS=2 -DK=3 -DM=2 || status=1
verify read-timeouts -DN=4 -DCLIENTS=2 -DK=2 -DM=2 -DTIMEOUTS=2 || status=1
verify write-timeouts -DN=4 -DCLIENTS=2 -DK=2 -DWRITES -DTIMEOUTS=2 || status=1
verify stop-drain -DN=4 -DCLIENTS=2 -DK=2 -DM=2 -DSTOP -DTIMEOUTS=1 || status=1
verify stop-writes -DN=2 -DCLIENTS=2 -DK=2 -DWRITES -DSTOP -DTIMEOUTS=1 || status=1
echo "broken variants (must fail):"
for v in "BROKEN_NO_CQ_ROOM -DN=2 -DCLIENTS=2 -DK=3 -DGREEDY" "BROKEN_RING_EARLY -DN=4 -DCLIENTS=2 -DK=2" \
         "BROKEN_RELEASE_EARLY -DN=2 -DCLIENTS=2 -DK=3" "BROKEN_PHASE -DN=2 -DCLIENTS=2 -DK=3" \
         "BROKEN_ABANDON_WRITE -DN=4 -DCLIENTS=2 -DK=2 -DWRITES -DTIMEOUTS=2"; do
  set -- $v
  name=$1; shift
  verify "$name" "-D$name" "$@"
  case $? in
    0) echo "  $name passed: the model does not catch it"; status=1 ;;
    2) status=1 ;;
  esac
done
model=$PWD/slot.pml
echo "validated read of a slot (must pass):"
verify slot-3-cycles -DCYCLES=3 -DREADS=2 || status=1
verify slot-4-cycles -DCYCLES=4 -DREADS=3 || status=1
echo "broken variants (must fail):"
for v in BROKEN_NO_GEN BROKEN_GEN_LATE BROKEN_NO_RECHECK; do
  verify "$v" "-D$v" -DCYCLES=3
  case $? in
    0) echo "  $v passed: the model does not catch it"; status=1 ;;
    2) status=1 ;;
  esac
done
echo "read through a page hint (must pass):"
verify hint-3-cycles -DHINT -DCYCLES=3 -DREADS=2 || status=1
verify hint-4-cycles -DHINT -DCYCLES=4 -DREADS=3 || status=1
echo "broken variants (must fail):"
for v in BROKEN_HINT_NO_KEY BROKEN_HINT_NO_GEN; do
  verify "hint-$v" -DHINT "-D$v" -DCYCLES=3
  case $? in
    0) echo "  hint-$v passed: the model does not catch it"; status=1 ;;
    2) status=1 ;;
  esac
done
echo "later reads of a page already read (read_seen; must pass):"
verify seen-3-cycles -DSEEN -DCYCLES=3 -DREADS=3 || status=1
verify seen-hint-3-cycles -DSEEN -DHINT -DCYCLES=3 -DREADS=3 || status=1
verify seen-4-cycles -DSEEN -DCYCLES=4 -DREADS=4 || status=1
echo "broken variant (must fail):"
verify seen-BROKEN_SEEN_NO_GEN -DSEEN -DBROKEN_SEEN_NO_GEN -DCYCLES=3 -DREADS=3
case $? in
  0) echo "  seen-BROKEN_SEEN_NO_GEN passed: the model does not catch it"; status=1 ;;
  2) status=1 ;;
esac
exit $status
