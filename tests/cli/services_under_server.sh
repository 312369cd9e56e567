#!/usr/bin/env bash
# The services through one door: a graph run and taxi queries against a
# `deepwell serve` this script starts (the files are its datasets, granted
# to this user), each checked against its CPU reference and timed beside
# the same run with a controller in its own process. CPU threads (--cpu)
# in CI; with --gpu, GPU clients, and the ratios (server / in process) go
# to OUT_JSON if set.
#   tests/cli/services_under_server.sh path/to/deepwell [--gpu]
set -uo pipefail
bin=${1:?usage: services_under_server.sh DEEPWELL [--gpu]}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # some steps run from the scratch directory
gpu=${2:-}
dir=$(mktemp -d /tmp/deepwell-svc.XXXXXX)
sock="$dir/dw.sock"
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

clients=(--cpu)
scale=14 rows=400000
if [ "$gpu" = --gpu ]; then clients=(); scale=${SVC_SCALE:-22}; rows=${SVC_ROWS:-50000000}; fi
g="$dir/g.dwg"
t="$dir/t.dwc"
"$bin" graph generate --scale "$scale" --degree 16 -o "$g" -q || exit 1
"$bin" table gen "$t" --rows "$rows" >/dev/null || exit 1
kvfile="$dir/store.kv"
truncate -s 8M "$kvfile"  # made by the admin; the client formats it through the server
ckptfile="$dir/model.ckpt"
truncate -s 1G "$ckptfile"  # the same: blank, a store made in place by the first save
# A tree of text for grep (the file API): files of words from a dictionary,
# some not in it, deterministic.
nfiles=300
[ "$gpu" = --gpu ] && nfiles=${SVC_GREP_FILES:-6000}
mkdir -p "$dir/src" "$dir/out"
python3 - "$dir" "$nfiles" <<'PY' || exit 1
import random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(11)
words = ["w%04d" % i for i in range(3000)]
open(f"{d}/dict.txt", "w").write("\n".join(words[:2000]) + "\n")
for i in range(n):
    sub = f"{d}/src/d{i % 17}"
    import os; os.makedirs(sub, exist_ok=True)
    size = rng.choice([300, 2000, 9000, 40000])
    out, total = [], 0
    while total < size:
        w = rng.choice(words) if rng.random() < 0.8 else "zz%d" % rng.randrange(100000)
        out.append(w); total += len(w) + 1
    open(f"{sub}/f{i}.txt", "w").write(" ".join(out) + "\n")
PY
# A vector index (the server's dataset "vecs"), its queries and their truth.
"$bin" vectors gen "$dir/v.fbin" --count 6000 --dim 32 >/dev/null &&
  "$bin" vectors gen "$dir/vq.fbin" --count 200 --dim 32 --stream 1 >/dev/null &&
  "$bin" vectors truth "$dir/v.fbin" "$dir/vq.fbin" "$dir/vt.bin" --k 10 >/dev/null &&
  "$bin" vectors build "$dir/v.fbin" "$dir/v.dwv" --cpu --degree 16 --list 32 >/dev/null 2>&1 || exit 1
cat >"$dir/ds.toml" <<TOML
[server]
socket = "$sock"
${SVC_SERVER_KEYS:-}
[[dataset]]
name = "graph"
file = "$g"
[[dataset]]
name = "taxi"
file = "$t"
[[dataset]]
name = "kv"
file = "$kvfile"
writable = true
[[dataset]]
name = "ckpt"
file = "$ckptfile"
writable = true
[[dataset]]
name = "vecs"
file = "$dir/v.dwv"
[[dataset]]
name = "src"
tree = "$dir/src"
[[dataset]]
name = "out"
tree = "$dir/out"
writable = true
[[grant]]
dataset = "*"
uid = $(id -u)
[[grant]]
dataset = "kv"
uid = $(id -u)
access = "read-write"
[[grant]]
dataset = "out"
uid = $(id -u)
access = "read-write"
[[grant]]
dataset = "ckpt"
uid = $(id -u)
access = "read-write"
TOML
"$bin" serve --config "$dir/ds.toml" 2>"$dir/server.log" &
server_pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "FAIL: the server did not start"; cat "$dir/server.log"; exit 1; }

# name, then the command's arguments: run in process and under the server,
# each --check'ed; their best seconds (3 runs) go to $dir/<name>.{local,server}.
both() {
  local name=$1; shift
  for where in local server; do
    local extra=()
    [ $where = server ] && extra=(--server "$sock")
    for rep in 1 2 3; do
      local check=()
      [ $rep = 1 ] && check=(--check)
      if ! out=$("$@" "${clients[@]}" "${extra[@]}" "${check[@]}" --json "$dir/$name.$where.json" 2>&1); then
        fail "$name ($where): $(tail -3 <<<"$out")"
        return
      fi
      if [ $rep = 1 ] && grep -qiE "differ|DIFFERENT|disagree" <<<"$out"; then
        fail "$name ($where): the answer differs from the reference: $(grep -iE -m1 'differ|disagree' <<<"$out")"
      fi
    done
  done
  python3 - "$dir" "$name" <<'PY'
import json, sys
d, name = sys.argv[1], sys.argv[2]
best = {}
for where in ("local", "server"):
    secs = [json.loads(l)["seconds"] for l in open(f"{d}/{name}.{where}.json") if '"seconds"' in l]
    best[where] = min(s for s in secs if s > 0)
print(f"ok   {name}: in process {best['local']:.4f} s, under the server {best['server']:.4f} s, "
      f"speed under the server / in process {best['local'] / best['server']:.2f}")
with open(f"{d}/ratios.jsonl", "a") as f:
    f.write(json.dumps({"service": name, "local_seconds": best["local"], "server_seconds": best["server"],
                        "server_vs_embedded": best["local"] / best["server"]}) + "\n")
PY
}

both graph_bfs "$bin" graph bfs "$g" --repeat 1
both graph_cc "$bin" graph cc "$g" --repeat 1
both taxi_q0 "$bin" table query "$t" -q 0
both taxi_q5 "$bin" table query "$t" -q 5
if [ "$gpu" = --gpu ]; then
  # Every miss through the controller's queues (no direct tier): in process,
  # or across the socket's queue pairs to the server's pollers.
  both graph_bfs_controller "$bin" graph bfs "$g" --repeat 1 --tier controller
  both graph_pagerank_controller "$bin" graph pagerank "$g" --repeat 1 --tier controller --iterations 5
  both taxi_q5_controller "$bin" table query "$t" -q 5 --no-direct-tier
fi

# grep through the file API: in process (--check'ed against a plain scan),
# and under the server on its trees; the two outputs equal, line for line.
grep_run() {  # where rep
  local where=$1 rep=$2 args=()
  if [ "$where" = local ]; then
    args=("$dir/src" --out-dir "$dir/out" --out "local.out")
    [ "$rep" = 1 ] && args+=(--check)
  else
    args=(src --out-dir out --out "server.out" --server "$sock")
  fi
  "$bin" grep "${args[@]}" --dict "$dir/dict.txt" "${clients[@]}" --json "$dir/grep.$where.json" 2>&1
}
grep_ok=1
for where in local server; do
  for rep in 1 2 3; do
    if ! out=$(grep_run $where $rep); then
      fail "grep ($where): $(tail -3 <<<"$out")"; grep_ok=0; break 2
    fi
    if [ "$rep" = 1 ] && [ $where = local ] && ! grep -q "equal" <<<"$out"; then
      fail "grep (local): the counts differ from a plain scan: $(tail -2 <<<"$out")"; grep_ok=0
    fi
  done
done
if [ $grep_ok = 1 ]; then
  if ! cmp -s <(sort "$dir/out/local.out") <(sort "$dir/out/server.out"); then
    fail "grep under the server counts differently from in process: $(diff <(sort "$dir/out/local.out") <(sort "$dir/out/server.out") | head -3)"
  else
    python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
best = {}
for where in ("local", "server"):
    secs = [json.loads(l)["seconds"] for l in open(f"{d}/grep.{where}.json") if '"seconds"' in l]
    best[where] = min(s for s in secs if s > 0)
lines = sum(1 for _ in open(f"{d}/out/server.out"))
print(f"ok   grep: {lines} lines, equal in process and under the server; in process {best['local']:.4f} s, "
      f"under the server {best['server']:.4f} s, speed under the server / in process {best['local'] / best['server']:.2f}")
with open(f"{d}/ratios.jsonl", "a") as f:
    f.write(json.dumps({"service": "grep", "local_seconds": best["local"], "server_seconds": best["server"],
                        "server_vs_embedded": best["local"] / best["server"]}) + "\n")
PY
  fi
fi
# A tree the server does not offer, and writing into the read-only one.
if out=$("$bin" grep nope --out-dir out --server "$sock" --dict "$dir/dict.txt" "${clients[@]}" 2>&1); then
  fail "grep of a tree the server does not offer ran: $(tail -2 <<<"$out")"
elif ! grep -q "no tree 'nope' is offered" <<<"$out"; then
  fail "grep of a tree not offered: the error does not say so: $(tail -2 <<<"$out")"
fi
if out=$("$bin" grep src --out-dir src --server "$sock" --dict "$dir/dict.txt" "${clients[@]}" 2>&1); then
  fail "grep wrote into a read-only tree: $(tail -2 <<<"$out")"
elif ! grep -q "read-only" <<<"$out"; then
  fail "grep into a read-only tree: the error does not say so: $(tail -2 <<<"$out")"
else
  echo "ok   grep refused a tree not offered and a read-only output tree"
fi

# Checkpoints (Python, deepwell.checkpoint): a state dict saved and loaded
# in process (a file of this process) and under the server (its dataset),
# best of 3 saves each; every load equal to what was saved. GPU tensors
# with --gpu, NumPy arrays on CPU clients otherwise.
libdir=$(cd "$(dirname "$bin")/.." && pwd)
# A sanitizer's build of the library cannot be loaded into a plain python.
sanitized=$(ldd "$libdir/libdeepwell_c.so" 2>/dev/null | grep -oE 'lib(t|a)san[^ ]*' | head -1)
if [ -n "$sanitized" ]; then
  echo "skip checkpoint: $libdir/libdeepwell_c.so is a sanitizer's build ($sanitized), which python cannot load"
elif [ -f "$libdir/libdeepwell_c.so" ] && python3 -c "import numpy" 2>/dev/null; then
  if out=$(DEEPWELL_LIBRARY="$libdir/libdeepwell_c.so" PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)/python" \
      python3 - "$dir" "$sock" "$gpu" <<'PY' 2>&1
import json, sys, time
import numpy as np
import deepwell, deepwell.checkpoint as ckpt
d, sock, gpu = sys.argv[1], sys.argv[2], sys.argv[3] == "--gpu"
rng = np.random.default_rng(3)
mib = 64 if gpu else 16
arrays = {f"layer{i}.w": rng.standard_normal(mib * (1 << 20) // 4 // 8, dtype=np.float32) for i in range(8)}
if gpu:
    import torch
    state = {k: torch.from_numpy(v).cuda() for k, v in arrays.items()}
else:
    state = arrays
def same(got):
    for k, v in arrays.items():
        g = got[k]
        g = g.cpu().numpy() if hasattr(g, "cpu") else np.asarray(g)
        if g.tobytes() != v.tobytes():
            raise SystemExit(f"checkpoint: {k} read back differs")
best = {}
for where, target in (("local", f"{d}/local.ckpt"), ("server", "ckpt")):
    if where == "server":
        deepwell.connect(sock)
    secs = []
    for rep in range(3):
        if rep:  # a full save each time: every tensor changed
            for k in state:
                state[k] += 1
                if gpu:
                    arrays[k] += 1
        t0 = time.perf_counter()
        ckpt.save(state, target)
        secs.append(time.perf_counter() - t0)
    same(ckpt.load(target, numpy=True))
    best[where] = min(secs)
    if where == "server":
        deepwell.disconnect()
print(f"ok   checkpoint: {8 * mib} MiB, every load equal to its save; in process {best['local']:.4f} s, "
      f"under the server {best['server']:.4f} s, speed under the server / in process {best['local'] / best['server']:.2f}")
with open(f"{d}/ratios.jsonl", "a") as f:
    f.write(json.dumps({"service": "checkpoint_save", "local_seconds": best["local"], "server_seconds": best["server"],
                        "server_vs_embedded": best["local"] / best["server"]}) + "\n")
PY
  ); then
    echo "$out" | tail -1
  else
    fail "checkpoint: $(tail -3 <<<"$out")"
  fi
else
  echo "skip checkpoint: no libdeepwell_c.so beside $bin, or no numpy"
fi

# A key-value store in the server's dataset: made, filled and read through
# the server; then read from the file in this process, the same values.
kvgpu=()
[ "$gpu" = --gpu ] && kvgpu=(--gpu)
python3 -c 'import sys
for k in range(0, 6000, 3): print(k, "v%013d" % (k * 7))' >"$dir/pairs.txt"
keys=$(seq 0 300 5999 | tr '\n' ' ')
if ! out=$("$bin" kv create kv --server "$sock" --value-bytes 16 --capacity 4000 --log-rows 4096 "${kvgpu[@]}" 2>&1) ||
   ! out=$("$bin" kv set kv --server "$sock" --from "$dir/pairs.txt" "${kvgpu[@]}" 2>&1); then
  fail "kv under the server: $(tail -2 <<<"$out")"
else
  # shellcheck disable=SC2086
  served=$("$bin" kv get kv --server "$sock" $keys "${kvgpu[@]}" 2>&1)
  # shellcheck disable=SC2086
  local_read=$("$bin" kv get "$kvfile" $keys 2>&1)
  want=$(for k in $keys; do if [ $((k % 3)) = 0 ]; then printf '%s v%013d\n' "$k" $((k * 7)); else echo "$k not found"; fi; done)
  if [ "$served" != "$want" ]; then
    fail "kv get under the server differs from what was set: $(diff <(echo "$want") <(echo "$served") | head -4)"
  elif [ "$local_read" != "$want" ]; then
    fail "kv get of the file in process differs: $(diff <(echo "$want") <(echo "$local_read") | head -4)"
  else
    echo "ok   kv: $(wc -l <"$dir/pairs.txt") pairs set under the server, read back through it and from the file"
  fi
fi

# Vector search: in process (the file) and under the server (the dataset's
# name, no file of that name here: header, codes and records all come over
# the link): the same search, so the same recall and steps.
vs() { "$bin" vectors search "$1" "$dir/vq.fbin" --truth "$dir/vt.bin" --list 40 --cache 1MiB "${clients[@]}" "${@:2}" 2>&1; }
if ! local_vs=$(vs "$dir/v.dwv" --json "$dir/vs.local.json") || ! served_vs=$(cd "$dir" && vs vecs --server "$sock" --json "$dir/vs.server.json"); then
  fail "vectors search: $(tail -2 <<<"$local_vs") $(tail -2 <<<"$served_vs")"
elif ! python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
a, b = (json.loads(open(f"{d}/vs.{w}.json").readline()) for w in ("local", "server"))
keys = ("recall", "expansions_per_query", "distances_per_query")
if any(a[k] != b[k] for k in keys) or not b["server"] or a["recall"] < 0.9:
    raise SystemExit(f"in process {[a[k] for k in keys]}, under the server {[b[k] for k in keys]}")
print(f"ok   vectors: recall@10 {a['recall']:.3f}, the same search in process and under the server")
PY
then
  fail "vectors search under the server differs from in process"
fi

# What a client may not do, from the command line: a file the server does not offer.
cp "$g" "$dir/other.dwg"
if out=$("$bin" graph bfs "$dir/other.dwg" "${clients[@]}" --server "$sock" 2>&1); then
  fail "a graph that is not a dataset ran under the server: $(tail -2 <<<"$out")"
elif ! grep -q "no dataset" <<<"$out"; then
  fail "a graph that is not a dataset: the error does not say so: $(tail -2 <<<"$out")"
else
  echo "ok   a file the server does not offer: $(grep -m1 -o 'no dataset.*' <<<"$out" | cut -c1-120)"
fi
if [ -n "${OUT_JSON:-}" ] && [ -f "$dir/ratios.jsonl" ]; then cp "$dir/ratios.jsonl" "$OUT_JSON"; fi
if [ $failures -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "services under the server: every answer equal to its reference"
