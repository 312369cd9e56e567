#!/usr/bin/env bash
# The deepwell command refuses bad input with a message that names the
# problem and a failing exit status: never a crash (a signal), a hang or a
# silent success. Usage: bad_input.sh path/to/deepwell
set -u
cli=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 100000 /dev/urandom >"$dir/junk.bin"
: >"$dir/empty.bin"
"$cli" graph generate --scale 6 -o "$dir/g.dwg" -q >/dev/null 2>&1 || { echo "FAIL: could not make a small graph"; exit 1; }
"$cli" table gen "$dir/t.dwcol" --rows 1000 >/dev/null 2>&1 || { echo "FAIL: could not make a small table"; exit 1; }
failed=0
# expect SUBSTRING ARGS...: exits 1-123 within 60 s, and says SUBSTRING
# (with_env=VAR=VALUE before it: run with that in the environment).
expect() {
  local want=$1; shift
  local out rc
  out=$(timeout -k 5 60 env ${with_env:-} "$cli" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL (exit $rc): deepwell $*"; echo "$out" | tail -3; failed=1
  elif [[ "$out" != *"$want"* ]]; then
    echo "FAIL (no '$want'): deepwell $*"; echo "$out" | tail -3; failed=1
  else
    echo "ok: deepwell $* -> $(echo "$out" | grep -m1 -F -- "$want" | cut -c1-140)"
  fi
}
expect "not a column file" table info "$dir/junk.bin"
expect "shorter than its header" table info "$dir/empty.bin"
expect "No such file" table info "$dir/absent.dwcol"
expect "not a column file" table query "$dir/junk.bin" --cpu
expect "-5 is negative" table gen "$dir/x.dwcol" --rows -5
expect "at least 1" table gen "$dir/x.dwcol" --rows 0
expect "not in range" table query "$dir/t.dwcol" --cpu --query 7
expect "iops 'lots' is not a positive number" table query "$dir/t.dwcol" --cpu --device-profile iops=lots,bandwidth=1GiB
expect "needs both iops and bandwidth" table profile "$dir/t.dwcol" --device-profile iops=5
expect "unknown name 'speed'" table query "$dir/t.dwcol" --cpu --device-profile speed=3
with_env=DEEPWELL_DEVICE_PROFILE=junk expect "DEEPWELL_DEVICE_PROFILE" table profile "$dir/t.dwcol"
expect "route: slow not in" table query "$dir/t.dwcol" --cpu --route slow
expect "not a deepwell graph file" graph bfs "$dir/junk.bin" --cpu
expect "truncated" graph cc "$dir/empty.bin" --cpu
expect "-7 is negative" graph bfs "$dir/g.dwg" --cpu --source -7
expect "out of range" graph bfs "$dir/g.dwg" --cpu --source 1000000000000
# Corrupt graph files: an offset past the edges, an id past the nodes.
offsets_at=$("$cli" graph info "$dir/g.dwg" | sed -n 's/.*offsets @\([0-9]*\).*/\1/p')
neighbours_at=$("$cli" graph info "$dir/g.dwg" | sed -n 's/.*neighbours @\([0-9]*\).*/\1/p')
cp "$dir/g.dwg" "$dir/bad_offset.dwg"
printf '\x00\x10\xa5\xd4\xe8\x00\x00\x00' | dd of="$dir/bad_offset.dwg" bs=1 seek=$((offsets_at + 8 * 20)) conv=notrunc status=none
cp "$dir/g.dwg" "$dir/bad_id.dwg"
printf '\x00\xff\xff\xff' | dd of="$dir/bad_id.dwg" bs=1 seek=$((neighbours_at + 4 * 5)) conv=notrunc status=none
# The graph files the command line writes carry a CRC-32C a 4 KiB block:
# a changed byte is caught by its block's sum before the structural checks
# see it, on every read path (those checks, for a file whose sums match bad
# data, are in tests/cpu/test_graph.cpp; tests/cli/corrupt_files.sh flips
# bytes on every read path).
for a in bfs cc pagerank; do
  expect "do not match their checksum" graph $a "$dir/bad_offset.dwg" --cpu --mode memory
  expect "do not match their checksum" graph $a "$dir/bad_id.dwg" --cpu --mode memory --check
done
for a in cc pagerank; do  # deepwell's own run: the lists are checked as the cache reads them
  expect "file is corrupt" graph $a "$dir/bad_id.dwg" --cpu
done
# The same on the GPU where there is one (GPU memory and through the cache).
if nvidia-smi -L >/dev/null 2>&1; then
  for a in bfs cc pagerank; do
    expect "do not match their checksum" graph $a "$dir/bad_offset.dwg"
    expect "do not match their checksum" graph $a "$dir/bad_id.dwg" --check
  done
  for a in cc pagerank; do
    expect "file is corrupt" graph $a "$dir/bad_id.dwg"
  done
fi
expect "must be 1 to 40" graph generate --scale 0 -o "$dir/g0.dwg" -q
expect "is negative" graph bfs "$dir/g.dwg" --cpu --long-lists -1
if "$cli" serve --help >/dev/null 2>&1; then  # built with the server (toml++)
  expect "cannot read" serve --config "$dir/absent.toml"
  echo 'garbage = [' >"$dir/bad.toml"
  expect "bad.toml:1" serve --config "$dir/bad.toml"
  expect "no deepwell server" stat --socket "$dir/absent.sock"
fi
printf 'alpha\nbeta\n' >"$dir/words"  # (the GPU machine has no /usr/share/dict/words)
expect "is not a directory" grep "$dir/absent" --cpu --dict "$dir/words"
expect "cannot read the dictionary" grep "$dir" --cpu --dict "$dir/absent-words"
expect "a piece must be a multiple of 4096 bytes" grep "$dir" --cpu --dict "$dir/absent-words" --piece-bytes 5000
expect "from 16 KiB to 1 GiB, not 4096" grep "$dir" --cpu --dict "$dir/absent-words" --piece-bytes 4096
# A misspelt setting is named (settings is a report: it still exits 0).
out=$(DEEPWELL_CACHE_SIZE=1G timeout -k 5 60 "$cli" settings 2>&1)
if [[ "$out" == *"DEEPWELL_CACHE_SIZE is not a deepwell setting"*"did you mean DEEPWELL_CACHE_BYTES?"* ]]; then
  echo "ok: DEEPWELL_CACHE_SIZE=1G deepwell settings -> $(echo "$out" | grep -m1 DEEPWELL_CACHE_SIZE)"
else
  echo "FAIL: DEEPWELL_CACHE_SIZE=1G deepwell settings does not name the variable"; failed=1
fi
with_env=DEEPWELL_CACHE_BYTES=lots expect "DEEPWELL_CACHE_BYTES=lots is not a number" settings
# Unknown commands are named, with the valid ones; a GPU command without a
# GPU says so in one line and names the --cpu command (GPUs hidden here).
expect "'frobnicate' is not a command; the commands are:" frobnicate
expect "'walk' is not a command; the commands are: generate" graph walk
with_env=CUDA_VISIBLE_DEVICES= expect "--cpu\` runs the same on CPU threads" graph bfs "$dir/g.dwg"
with_env=CUDA_VISIBLE_DEVICES= expect "--cpu\` runs the same on CPU threads" table query "$dir/t.dwcol"
expect "give --cache" graph bfs "$dir/g.dwg" --cpu --cache 4K
# The key-value store's command.
"$cli" kv create "$dir/s.kv" --value-bytes 8 --capacity 100 >/dev/null 2>&1 || { echo "FAIL: kv create"; failed=1; }
expect "exists" kv create "$dir/s.kv"
expect "is not a key" kv get "$dir/s.kv" -3
expect "the store's values are 8" kv set "$dir/s.kv" 1 123456789
expect "not found" kv get "$dir/s.kv" 5
expect "not a" kv info "$dir/junk.bin"
# Vector search: bad files, shapes and options (CPU clients; the GPU's are checked alike before a launch).
"$cli" vectors gen "$dir/v.fbin" --count 300 --dim 16 >/dev/null 2>&1 &&
  "$cli" vectors gen "$dir/q.fbin" --count 5 --dim 16 --stream 1 >/dev/null 2>&1 &&
  "$cli" vectors gen "$dir/q8.fbin" --count 5 --dim 8 --stream 1 >/dev/null 2>&1 &&
  "$cli" vectors build "$dir/v.fbin" "$dir/v.dwv" --degree 8 --list 16 >/dev/null 2>&1 ||
  { echo "FAIL: could not make a small vector index"; failed=1; }
expect "not a deepwell vector index" vectors search "$dir/junk.bin" "$dir/q.fbin" --cpu
expect "too short for a vector index" vectors info "$dir/empty.bin"
expect "queries of dimension 8 for an index of dimension 16" vectors search "$dir/v.dwv" "$dir/q8.fbin" --cpu
expect "larger than the index's 300 vectors" vectors search "$dir/v.dwv" "$dir/q.fbin" --cpu --k 500 --list 600
expect "cannot tell the element type" vectors build "$dir/junk.bin" "$dir/x.dwv"
expect "(truncated, or another element type?)" vectors build "$dir/v.fbin" "$dir/x.dwv" --type uint8
expect "--metric 'cosine'" vectors build "$dir/v.fbin" "$dir/x.dwv" --metric cosine
expect "--degree" vectors build "$dir/v.fbin" "$dir/x.dwv" --degree 999
cp "$dir/v.dwv" "$dir/bad.dwv"
printf '\x55' | dd of="$dir/bad.dwv" bs=1 seek=40 conv=notrunc status=none
expect "header does not match its checksum" vectors search "$dir/bad.dwv" "$dir/q.fbin" --cpu
# Outputs that are not files: a FIFO (a write with no reader would hang,
# a rename would replace it) and, as root, a device node (it was deleted
# or replaced: `table gen /dev/null` removed /dev/null).
mkfifo "$dir/fifo"
expect "a FIFO" graph generate --scale 4 -o "$dir/fifo"
expect "a FIFO" table gen "$dir/fifo" --rows 10
expect "a FIFO" vectors gen "$dir/fifo" --type f32 --count 10 --dim 4
expect "a FIFO" vectors build "$dir/v.fbin" "$dir/fifo" --degree 8 --list 16
[ -p "$dir/fifo" ] || { echo "FAIL: the FIFO was replaced"; failed=1; }
if [ "$(id -u)" = 0 ] && mknod "$dir/null" c 1 3 2>/dev/null; then
  expect "a character device" table gen "$dir/null" --rows 10
  expect "a character device" graph generate --scale 4 -o "$dir/null"
  [ -c "$dir/null" ] || { echo "FAIL: the device node was replaced or deleted"; failed=1; }
fi
# Numbers and sizes read whole, files for --json checked before the run.
expect "is too large" graph bfs "$dir/g.dwg" --cpu --source 99999999999999999999
expect "not a power of two" graph bfs "$dir/g.dwg" --cpu --page 1MiB
expect "far past any page size" table query "$dir/t.dwcol" --cpu --page 4294971392
expect "cannot make it in" graph bfs "$dir/g.dwg" --cpu --json "$dir/absent/x.json"
expect "is a directory" table query "$dir/t.dwcol" --cpu --json "$dir"
# grep's output: never a file it searches or its dictionary, refused before the run.
mkdir -p "$dir/tree/sub" && echo "hello world" > "$dir/tree/a.txt" && printf 'hello\nworld\n' > "$dir/words"
expect "inside the tree" grep "$dir/tree" --cpu --dict "$dir/words" --out-dir "$dir/tree" --out a.txt
expect "inside the tree" grep "$dir/tree" --cpu --dict "$dir/words" --out-dir "$dir/tree/sub"
expect "is the input file too" grep "$dir/tree" --cpu --dict "$dir/words" --out-dir "$dir" --out words
expect "is not a file name" grep "$dir/tree" --cpu --dict "$dir/words" --out ../x/y.out
expect "at most 4096 threads" grep "$dir/tree" --cpu --dict "$dir/words" --out-dir "$dir" --workers 100000
grep -q hello "$dir/tree/a.txt" && grep -q world "$dir/words" || { echo "FAIL: grep emptied an input"; failed=1; }
# A Matrix Market size line claiming far more entries than the file holds.
printf '%%%%MatrixMarket matrix coordinate pattern general\n3 3 99999999999999\n1 2\n2 3\n' > "$dir/m.mtx"
expect "the size line says 99999999999999" graph convert "$dir/m.mtx" -o "$dir/m.dwg" -q
# Every DEEPWELL_* setting checked before any command runs (a kv command
# never read DEEPWELL_PAGE_SIZE, and DEEPWELL_LOG=loud was ignored).
with_env=DEEPWELL_LOG=loud expect "DEEPWELL_LOG=loud is not one of" graph info "$dir/g.dwg"
with_env=DEEPWELL_PAGE_SIZE=1000 expect "DEEPWELL_PAGE_SIZE=1000 is not a power of two" graph info "$dir/g.dwg"
# A setting the pollers read, named (it was "controller lost").
"$cli" kv create "$dir/e.kv" --capacity 100 >/dev/null 2>&1
with_env=DEEPWELL_STAGING_STORES=x expect "DEEPWELL_STAGING_STORES=x is not one of" kv get "$dir/e.kv" 1
# A stray huge node id: the memory it would take, named (not bad_alloc).
printf '0 1\n1 1000000000000000\n' > "$dir/huge.txt"
expect "renumber the ids densely" graph convert "$dir/huge.txt" -o "$dir/huge.dwg" -q
printf '0 1\n1 18446744073709551615\n' > "$dir/huge.txt"
expect "is too large" graph convert "$dir/huge.txt" -o "$dir/huge.dwg" -q
# The input named as the output: refused before it is replaced.
printf '0 1\n1 2\n' > "$dir/e.txt"
expect "is the input file too" graph convert "$dir/e.txt" -o "$dir/e.txt"
expect "is the input file too" vectors build "$dir/v.fbin" "$dir/v.fbin"
grep -q "^0 1" "$dir/e.txt" || { echo "FAIL: the input was replaced"; failed=1; }
# A write that fails leaves the file that was there as it was (table gen
# and vectors gen had truncated a good file in place, then failed).
"$cli" table gen "$dir/keep.dwcol" --rows 1000 >/dev/null 2>&1 && "$cli" vectors gen "$dir/keep.fbin" --type f32 --count 1000 --dim 16 >/dev/null 2>&1
sums_before=$(md5sum "$dir/keep.dwcol" "$dir/keep.fbin")
out=$( (ulimit -f 256; "$cli" table gen "$dir/keep.dwcol" --rows 100000; "$cli" vectors gen "$dir/keep.fbin" --type f32 --count 100000 --dim 16) 2>&1)
if [ "$(md5sum "$dir/keep.dwcol" "$dir/keep.fbin")" != "$sums_before" ] || ls "$dir"/keep.*.partial >/dev/null 2>&1; then
  echo "FAIL: a failed table gen or vectors gen damaged the file that was there (or left a .partial)"; echo "$out" | tail -2; failed=1
else
  echo "ok: table gen, vectors gen past ulimit -f leave the file that was there -> $(echo "$out" | tail -1)"
fi
# Past a file-size limit: an error naming the file, not death by SIGXFSZ.
out=$( (ulimit -f 64; timeout -k 5 60 "$cli" graph generate --scale 12 -o "$dir/big.dwg" -q) 2>&1); rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [[ "$out" != *"too large"* ]]; then
  echo "FAIL (exit $rc): graph generate past ulimit -f"; echo "$out" | tail -2; failed=1
else
  echo "ok: graph generate past ulimit -f -> $(echo "$out" | tail -1)"
fi
[ -e "$dir/big.dwg.partial" ] && { echo "FAIL: a .partial left behind"; failed=1; }
[ $failed -eq 0 ] && echo "all refused clearly"
exit $failed
