#!/usr/bin/env bash
# Model checks of the queue protocol (model/queue.pml) and of the cache's
# pin-free validated read against eviction, through the directory and through a
# page hint (model/slot.pml). The protocol must pass
# in each configuration, and each deliberately broken variant must fail
# (otherwise the model would check nothing). Needs spin and a C compiler;
# up to two minutes and 1 GB of memory per configuration. The
# configurations run side by side, MODEL_JOBS at a time (default: the
# number of cores), and are reported in the order below.
set -uo pipefail
cd "$(dirname "$0")"
command -v spin >/dev/null || { echo "model/check.sh: spin is not installed"; exit 1; }
here=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One configuration, in a directory of its own: writes "$work/NAME.line" (the
# verdict line) and "$work/NAME.rc" (0: no error found, 1: errors, 2: the
# verifier did not finish).
verify_one() {  # model name spin-defines...
  local model=$1 name=$2; shift 2
  local dir="$work/$name.d"
  mkdir -p "$dir"
  ( cd "$dir" && spin -a "$@" "$here/$model" >/dev/null &&
    cc -O2 -DCOLLAPSE -DVECTORSZ=4096 -DMEMLIM=4000 -o pan pan.c 2>/dev/null &&
    timeout 300 ./pan -m100000 >"$work/$name.out" 2>&1 ) || true
  local errors states rc
  errors=$(awk '/errors:/{print $NF}' "$work/$name.out" 2>/dev/null | tail -1)
  states=$(awk '/states, stored/{print $1}' "$work/$name.out" 2>/dev/null | head -1)
  {
    echo "  $name: errors=${errors:-?} states=${states:-?}"
    if [ -z "$errors" ] || grep -q "max search depth too small\|out of memory" "$work/$name.out"; then
      echo "  $name: the verifier did not finish"; rc=2
    elif [ "$errors" = 0 ]; then rc=0; else rc=1; fi
  } >"$work/$name.line"
  echo "${rc:-2}" >"$work/$name.rc"
  rm -rf "$dir"
}
export -f verify_one
export work here

# The plan: section headers and configurations, in report order.
#   section TEXT
#   pass|fail MODEL NAME DEFINES...   (pass: must find no error; fail: must find one)
plan=$(cat <<'EOF'
section protocol (must pass):
pass queue.pml reorder-2x2 -DN=4 -DCLIENTS=2 -DK=2
pass queue.pml wrap-2x3 -DN=2 -DCLIENTS=2 -DK=3
pass queue.pml greedy-client -DN=2 -DCLIENTS=2 -DK=3 -DGREEDY
pass queue.pml two-outstanding -DN=4 -DCLIENTS=2 -DK=3 -DM=2
pass queue.pml read-timeouts -DN=4 -DCLIENTS=2 -DK=2 -DM=2 -DTIMEOUTS=2
pass queue.pml write-timeouts -DN=4 -DCLIENTS=2 -DK=2 -DWRITES -DTIMEOUTS=2
pass queue.pml stop-drain -DN=4 -DCLIENTS=2 -DK=2 -DM=2 -DSTOP -DTIMEOUTS=1
pass queue.pml stop-writes -DN=2 -DCLIENTS=2 -DK=2 -DWRITES -DSTOP -DTIMEOUTS=1
section broken variants (must fail):
fail queue.pml BROKEN_NO_CQ_ROOM -DBROKEN_NO_CQ_ROOM -DN=2 -DCLIENTS=2 -DK=3 -DGREEDY
fail queue.pml BROKEN_RING_EARLY -DBROKEN_RING_EARLY -DN=4 -DCLIENTS=2 -DK=2
fail queue.pml BROKEN_RELEASE_EARLY -DBROKEN_RELEASE_EARLY -DN=2 -DCLIENTS=2 -DK=3
fail queue.pml BROKEN_PHASE -DBROKEN_PHASE -DN=2 -DCLIENTS=2 -DK=3
fail queue.pml BROKEN_ABANDON_WRITE -DBROKEN_ABANDON_WRITE -DN=4 -DCLIENTS=2 -DK=2 -DWRITES -DTIMEOUTS=2
section validated read of a slot (must pass):
pass slot.pml slot-3-cycles -DCYCLES=3 -DREADS=2
pass slot.pml slot-4-cycles -DCYCLES=4 -DREADS=3
section broken variants (must fail):
fail slot.pml BROKEN_NO_GEN -DBROKEN_NO_GEN -DCYCLES=3
fail slot.pml BROKEN_GEN_LATE -DBROKEN_GEN_LATE -DCYCLES=3
fail slot.pml BROKEN_NO_RECHECK -DBROKEN_NO_RECHECK -DCYCLES=3
section read through a page hint (must pass):
pass slot.pml hint-3-cycles -DHINT -DCYCLES=3 -DREADS=2
pass slot.pml hint-4-cycles -DHINT -DCYCLES=4 -DREADS=3
section broken variants (must fail):
fail slot.pml hint-BROKEN_HINT_NO_KEY -DHINT -DBROKEN_HINT_NO_KEY -DCYCLES=3
fail slot.pml hint-BROKEN_HINT_NO_GEN -DHINT -DBROKEN_HINT_NO_GEN -DCYCLES=3
section later reads of a page already read (read_seen; must pass):
pass slot.pml seen-3-cycles -DSEEN -DCYCLES=3 -DREADS=3
pass slot.pml seen-hint-3-cycles -DSEEN -DHINT -DCYCLES=3 -DREADS=3
pass slot.pml seen-4-cycles -DSEEN -DCYCLES=4 -DREADS=4
section broken variant (must fail):
fail slot.pml seen-BROKEN_SEEN_NO_GEN -DSEEN -DBROKEN_SEEN_NO_GEN -DCYCLES=3 -DREADS=3
EOF
)

# Run every configuration; the longest ones (the protocol's) come first in
# the plan, so they start first.
echo "$plan" | awk '$1 != "section" {print substr($0, index($0, $2))}' |
  xargs -P "${MODEL_JOBS:-$(nproc)}" -L 1 bash -c 'verify_one "$@"' _

status=0
while read -r kind rest; do
  if [ "$kind" = section ]; then echo "$rest"; continue; fi
  read -r _ name _ <<<"$rest"
  cat "$work/$name.line" 2>/dev/null || echo "  $name: did not run"
  rc=$(cat "$work/$name.rc" 2>/dev/null || echo 2)
  case "$kind:$rc" in
    pass:0 | fail:1) ;;
    fail:0) echo "  $name passed: the model does not catch it"; status=1 ;;
    *) status=1 ;;
  esac
done <<<"$plan"
exit $status
