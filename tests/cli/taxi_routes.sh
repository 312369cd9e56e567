#!/usr/bin/env bash
# The taxi queries' routes end to end through the command line (issue 48):
# with the table dropped from the page cache before each run (posix_fadvise,
# no root needed), every route (pages, bulk, auto with a given profile)
# must give the plain scan's answers and say each column's route and why in
# --json, as asked. CPU threads (--cpu), and GPU warps with --gpu.
#   tests/cli/taxi_routes.sh path/to/deepwell [--gpu]
set -uo pipefail
bin=${1:?usage: taxi_routes.sh DEEPWELL [--gpu]}
gpu=${2:-}
dir=$(mktemp -d "${DEEPWELL_TEST_DIR:-/var/tmp}/deepwell-routes.XXXXXX")
trap 'rm -rf "$dir"' EXIT
table=$dir/t.dwcol
"$bin" table gen "$table" --rows 1000000 >/dev/null || { echo "FAIL: could not make a table"; exit 1; }
drop() {  # the table out of the page cache; false where the file system keeps it
  python3 - "$table" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fdatasync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
}
failures=0
clients=(--cpu)
[ "$gpu" = --gpu ] && clients+=("")
for client in "${clients[@]}"; do
  for case in "pages:" "bulk:" "auto:iops=100,bandwidth=1GiB" "auto:iops=1e9,bandwidth=1GiB"; do
    route=${case%%:*} profile=${case#*:}
    drop
    js=$dir/q.jsonl
    rm -f "$js"
    args=(table query "$table" --check --route "$route" --json "$js" --page 4096)
    [ -n "$client" ] && args+=("$client")
    [ -n "$profile" ] && args+=(--device-profile "$profile")
    if ! out=$(timeout -k 5 300 "$bin" "${args[@]}" 2>&1); then
      echo "FAIL: deepwell ${args[*]}"; echo "$out" | tail -5; failures=$((failures + 1)); continue
    fi
    # Every query equal to the plain scan; each column's route as the case
    # asks (the first query after the drop finds its columns cold; later
    # queries find the columns read in bulk before resident).
    if ! python3 - "$js" "$route" "$profile" <<'PY'
import json, sys
js, route, profile = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(js)]
assert len(rows) == 6, f"{len(rows)} queries reported"
for r in rows:
    assert r["checked"] == "equal", f"Q{r['query']}: {r['checked']}"
    assert r["failed"] == 0
    cols = r["route"]["columns"]
    assert len(cols) == r["query"] + 1
    for c in cols:
        assert c["why"].startswith(c["route"]), c
first = rows[0]["route"]["columns"][0]
want = {"pages": "pages", "bulk": "bulk", "auto": "bulk"}[route]
assert first["route"] == want, (route, first)
if route == "auto":
    assert rows[0]["route"]["profile"]["source"] == "given", rows[0]["route"]["profile"]
    q1 = rows[1]["route"]["columns"][1]  # total_amount: cold until Q1 (unless read in bulk by now)
    slow = profile.startswith("iops=100,")
    assert q1["route"] == ("bulk" if slow else "pages"), q1
    assert q1["pages_known"], q1
PY
    then
      echo "FAIL: deepwell ${args[*]}: its JSON is not as expected"; failures=$((failures + 1)); continue
    fi
    echo "ok: route $route ${profile:+($profile) }${client:-gpu}"
  done
done
[ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
