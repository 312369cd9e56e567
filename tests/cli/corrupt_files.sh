#!/usr/bin/env bash
# A flipped byte in a graph or column file, end to end through the command
# line: the run must fail and say the file is corrupt, never print an
# answer. Each read path is tried: the GPU's direct tier and its
# controller path, and CPU threads (--cpu), or --cpu alone where there is no
# GPU (CI).
#   tests/cli/corrupt_files.sh path/to/deepwell [--gpu]
set -uo pipefail
bin=${1:?usage: corrupt_files.sh DEEPWELL [--gpu]}
gpu=${2:-}
dir=$(mktemp -d /tmp/deepwell-corrupt.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0

flip() {  # file byte-offset: xor the byte with 0x5a
  python3 - "$1" "$2" <<'EOF'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x5A]))
EOF
}
u64_at() {  # file byte-offset: the little-endian uint64 there
  python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); f.seek(int(sys.argv[2])); print(struct.unpack("<Q", f.read(8))[0])' "$1" "$2"
}
expect_ok() {  # name command...
  if ! out=$("${@:2}" 2>&1); then
    echo "FAIL $1: the intact file failed: $out" | tail -5
    failures=$((failures + 1))
  fi
}
expect_corrupt() {  # name command...
  out=$("${@:2}" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] || ! grep -qiE "(not match|fail).*checksum" <<<"$out"; then
    echo "FAIL $1: rc=$rc, expected an error naming a checksum; output:"
    tail -5 <<<"$out"
    failures=$((failures + 1))
  else
    echo "ok   $1: $(grep -iE -m1 "(not match|fail).*checksum" <<<"$out" | cut -c1-240)"
  fi
}

modes=("--cpu")
[ "$gpu" = --gpu ] && modes=("--tier=direct" "--tier=controller" "--location=odirect" "--cpu")

g="$dir/g.dwg"
"$bin" graph generate --scale 12 --degree 8 -o "$g" -q || exit 1
for m in "${modes[@]}"; do expect_ok "graph bfs $m (intact)" "$bin" graph bfs "$g" "$m" --check; done
# The header's neighbours_at is the uint64 at byte 56 (csr_format.hpp).
nbr=$(u64_at "$g" 56)
flip "$g" $((nbr + 1000))
for m in "${modes[@]}"; do expect_corrupt "graph bfs $m (a neighbour byte flipped)" "$bin" graph bfs "$g" "$m"; done
expect_corrupt "graph info --check" "$bin" graph info "$g" --check

t="$dir/t.dwc"
"$bin" table gen "$t" --rows 200000 >/dev/null || exit 1
tmodes=("--cpu")
[ "$gpu" = --gpu ] && tmodes=("" "--no-direct-tier" "--odirect" "--cpu")
for m in "${tmodes[@]}"; do expect_ok "table query Q0 ${m:-gpu} (intact)" "$bin" table query "$t" -q 0 $m --check; done
# Q0's column (trip_distance): its descriptor's section offset. The header
# is 64 bytes (ncols at byte 12), then 96-byte descriptors: the name (48),
# type, width, scale, has_stats, reserved (8), then the offset.
col=$(python3 - "$t" <<'EOF'
import struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(64)
    (ncols,) = struct.unpack_from("<I", head, 12)
    descs = f.read(96 * ncols)
for i in range(ncols):
    d = descs[96 * i:96 * (i + 1)]
    if d[:48].split(b"\0")[0] == b"trip_distance":
        print(struct.unpack_from("<Q", d, 56)[0])
EOF
)
[ -n "$col" ] || { echo "FAIL: no trip_distance column in $t"; exit 1; }
flip "$t" $((col + 5000))
for m in "${tmodes[@]}"; do expect_corrupt "table query Q0 ${m:-gpu} (a value byte flipped)" "$bin" table query "$t" -q 0 $m; done

# A KV store: a byte of its table (from 64 KiB, docs/kv.md) flipped is
# damage `kv check` finds and reports with exit 1 (2: it cannot open).
kvf="$dir/s.kv"
"$bin" kv create "$kvf" --capacity 1000 >/dev/null 2>&1 || { echo "FAIL: kv create"; failures=$((failures + 1)); }
seq 1 50 | sed 's/.*/& v&/' | "$bin" kv set "$kvf" --from - >/dev/null 2>&1 || { echo "FAIL: kv set"; failures=$((failures + 1)); }
expect_ok "kv check (intact)" "$bin" kv check "$kvf"
flip "$kvf" $((65536 + 4096 + 40))
expect_corrupt "kv check (a table byte flipped)" "$bin" kv check "$kvf"
"$bin" kv check "$kvf" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] || { echo "FAIL kv check: exit $rc on a damaged table, its help says 1"; failures=$((failures + 1)); }
"$bin" kv check "$dir/absent.kv" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "FAIL kv check: exit $rc on a missing file, its help says 2"; failures=$((failures + 1)); }

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "corrupt files: every run refused the damaged bytes"
