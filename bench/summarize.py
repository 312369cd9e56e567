"""Turns the JSON lines the benchmarks append (one per measurement) into one
result object with top-level commit, device, config, metrics, ceilings,
baselines, ratios, goals and runs (the lines themselves).

    python3 bench/summarize.py bench.jsonl --commit abc123 -o summary.json

Only measured values are used: a key whose measurement is missing from the
lines is left out (and listed under "missing"), never filled in.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Iterable

# The goals: key -> (section, comparison, target).
GOALS = {
    "hit_elem_vs_hbm_read": ("ratios", ">=", 0.3),
    "hit_page_vs_hbm_read": ("ratios", ">=", 0.6),
    "miss4k_hostmem_direct_vs_h2d": ("ratios", ">=", 0.85),
    "miss4k_hostmem_ctrl_vs_h2d": ("ratios", ">=", 0.6),
    "miss4k_pagecache_direct_vs_h2d": ("ratios", ">=", 0.85),
    "miss4k_pagecache_ctrl_vs_h2d": ("ratios", ">=", 0.6),
    "miss4k_odirect_vs_uring": ("ratios", ">=", 0.9),
    "dependent_gather_vs_tiling": ("ratios", ">=", 3.0),
    "bulk_gather_vs_tiling": ("ratios", ">=", 1.0),
    "miss512_direct_miops": ("metrics", ">=", 30.0),
    "miss512_ctrl_miops": ("metrics", ">=", 8.0),
    "controller_cores_per_10gbps": ("metrics", "<=", 2.5),
    # The write path (the writes issue).
    "mixed33_vs_read_only": ("ratios", ">=", 0.7),
    "writeback_pagecache_vs_uring_write": ("ratios", ">=", 0.8),
    "writeback_odirect_vs_uring_write": ("ratios", ">=", 0.9),
    "write_flush_4k_controller_vs_d2h": ("ratios", ">=", 0.5),
}

Line = dict[str, Any]


def load_lines(paths: Iterable[str]) -> list[Line]:
    lines = []
    for path in paths:
        with open(path) as f:
            for n, text in enumerate(f, 1):
                text = text.strip()
                if not text:
                    continue
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON line ({e})") from None
    return lines


def select(lines: list[Line], benchmark: str, **config: Any) -> list[Line]:
    """The lines of `benchmark` whose config (or, for keys not in its
    config, the line itself) has every given value, in order."""
    def matches(line: Line) -> bool:
        cfg = line.get("config", {})
        return all((cfg[k] if k in cfg else line.get(k)) == v for k, v in config.items())
    return [l for l in lines if l.get("benchmark") == benchmark and matches(l)]


def find(lines: list[Line], benchmark: str, **config: Any) -> Line | None:
    """The last line that select() picks."""
    hits = select(lines, benchmark, **config)
    return hits[-1] if hits else None


def get(line: Line | None, *path: str) -> Any:
    for key in path:
        if not isinstance(line, dict) or key not in line:
            return None
        line = line[key]
    return line


def summarize(lines: list[Line], commit: str | None = None, config: dict | None = None) -> dict:
    out: dict[str, Any] = {
        "commit": commit or next((l["commit"] for l in lines if "commit" in l), "unknown"),
        "device": next((l["device"] for l in lines if "device" in l), "unknown"),
        "config": config or {},
        "metrics": {},
        "ceilings": {},
        "baselines": {},
        "ratios": {},
    }
    missing: list[str] = []

    def put(section: str, key: str, value: Any) -> None:
        if value is None:
            missing.append(key)
        else:
            out[section][key] = value

    # Ceilings: every GPU benchmark measures the link; the array benchmark
    # also HBM.
    put("ceilings", "h2d_memcpy_gbps", max((get(l, "ceilings", "h2d_memcpy_gbps") or 0 for l in lines), default=None) or None)
    put("ceilings", "hbm_random_4k_read_gbps", get(find(lines, "array", mode="all-hit"), "ceilings", "hbm_random_4k_read_gbps"))

    # array_ref: all-hit and all-miss.
    hit = find(lines, "array", mode="all-hit")
    put("ratios", "hit_elem_vs_hbm_read", get(hit, "ratios", "hit_elem_vs_hbm_read"))
    put("ratios", "hit_page_vs_hbm_read", get(hit, "ratios", "hit_page_vs_hbm_read"))
    put("metrics", "hit_elem8_reads_per_s", get(hit, "metrics", "elem_reads_per_s"))
    put("metrics", "hit_page_gbps", get(hit, "metrics", "page_gbps"))
    for e in select(lines, "array", mode="all-hit-elem", elem_bytes=8):
        blocks = get(e, "config", "min_blocks_per_sm") or 1
        lb = f"_lb{blocks}" if blocks > 1 else ""  # the kernel capped in registers (__launch_bounds__(256, blocks))
        if get(e, "config", "l2_window"):  # the lookup's metadata in a persisting L2 window
            out["ratios"][f"hit_elem8{lb}_l2window_vs_hbm_elem_reads"] = get(e, "ratios", "vs_hbm_elem_reads")
        elif blocks > 1:
            out["ratios"][f"hit_elem8{lb}_vs_hbm_elem_reads"] = get(e, "ratios", "vs_hbm_elem_reads")
    for size in (4, 8, 16, 32, 64):
        e = find(lines, "array", mode="all-hit-elem", elem_bytes=size)
        if e:
            out["metrics"][f"hit_elem{size}_reads_per_s"] = get(e, "metrics", "elem_reads_per_s")
            out["baselines"][f"hbm_elem{size}_reads_per_s"] = get(e, "baselines", "hbm_elem_reads_per_s")
            out["ratios"][f"hit_elem{size}_vs_hbm_elem_reads"] = get(e, "ratios", "vs_hbm_elem_reads")
    for loc in ("hostmem", "pagecache", "null"):
        for path, short in (("direct", "direct"), ("controller", "ctrl")):
            for page, name in ((4096, "4k"), (512, "512"), (65536, "64k")):
                m = find(lines, "array", mode="all-miss", location=loc, path=path, page_size=page)
                if not m:
                    continue
                key = f"miss{name}_{loc}_{short}"
                out["metrics"][key + "_miops"] = get(m, "metrics", "miops")
                out["metrics"][key + "_gbps"] = get(m, "metrics", "gbps")
                out["metrics"][key + "_controller_cores"] = get(m, "metrics", "controller_cores")
                link = get(m, "ceilings", "h2d_memcpy_gbps")
                if loc != "null" and link and get(m, "metrics", "gbps") is not None:
                    out["ratios"][key + "_vs_h2d"] = get(m, "metrics", "gbps") / link
    for key in ("miss4k_hostmem_direct_vs_h2d", "miss4k_hostmem_ctrl_vs_h2d", "miss4k_pagecache_direct_vs_h2d",
                "miss4k_pagecache_ctrl_vs_h2d"):
        if key not in out["ratios"]:
            missing.append(key)
    put("metrics", "miss512_direct_miops", get(find(lines, "array", mode="all-miss", location="hostmem", path="direct", page_size=512), "metrics", "miops"))
    put("metrics", "miss512_ctrl_miops", get(find(lines, "array", mode="all-miss", location="hostmem", path="controller", page_size=512), "metrics", "miops"))
    put("metrics", "controller_cores_per_10gbps", get(find(lines, "array", mode="all-miss", location="hostmem", path="controller", page_size=4096), "metrics", "controller_cores_per_10gbps"))
    for page, name in ((4096, "4k"), (512, "512"), (65536, "64k")):
        z = find(lines, "array", mode="all-miss-baseline", method="zero_copy", page_size=page)
        if z:
            out["baselines"][f"zero_copy_{name}_gbps"] = get(z, "metrics", "gbps")
            out["baselines"][f"zero_copy_{name}_miops"] = get(z, "metrics", "miops")
    # Mixed reads and writes (gpu_mixed_bench): each writer share against the
    # read-only run of the same location and access mode.
    for m in select(lines, "mixed"):
        cfg = m.get("config", {})
        if cfg.get("writer_pct", 0) == 0:
            continue
        who = "" if m.get("clients", "gpu") == "gpu" else f"_{m['clients']}"
        key = f"mixed{cfg['writer_pct']}_{cfg.get('location')}_{cfg.get('mode')}{who}_vs_read_only"
        out["ratios"][key] = get(m, "ratios", "vs_read_only")
    put("ratios", "mixed33_vs_read_only",
        get(find(lines, "mixed", clients="gpu", location="pagecache", mode="elem", writer_pct=33), "ratios", "vs_read_only"))
    # The controller's writes against a plain io_uring write loop on the same
    # file, block size, depth and cores (gpu_block_bench --op write).
    for direct, name in ((False, "pagecache"), (True, "odirect")):
        b = find(lines, "block", location="file", op="write", direct=direct, block=4096)
        put("ratios", f"writeback_{name}_vs_uring_write", get(b, "ratios", "vs_uring_loop_same_cores"))
    for path in ("direct", "controller"):
        w = find(lines, "array", mode="write-flush", path=path)
        if w:
            out["metrics"][f"write_flush_4k_{path}_gbps"] = get(w, "metrics", "gbps")
            out["ratios"][f"write_flush_4k_{path}_vs_d2h"] = get(w, "ratios", "vs_d2h")
            out["ceilings"]["d2h_memcpy_gbps"] = get(w, "ceilings_extra", "d2h_memcpy_gbps")
    u = find(lines, "array", mode="all-miss-baseline", method="unified_memory", page_size=4096)
    if u:
        out["baselines"]["unified_memory_miss4k_gbps"] = get(u, "metrics", "gbps")

    # Block benchmark: O_DIRECT through the controller against the io_uring loop.
    od = find(lines, "block", clients="gpu", location="file", direct=True, block=4096, op="read")
    put("ratios", "miss4k_odirect_vs_uring", get(od, "ratios", "vs_uring_loop_same_cores"))
    if od:
        out["ceilings"]["odirect_uring_loop_iops"] = get(od, "baselines", "uring_loop_same_cores", "iops")
    pc = find(lines, "block", clients="gpu", location="file", direct=False, block=4096, op="read")
    if pc:
        out["ratios"]["block_pagecache_vs_uring"] = get(pc, "ratios", "vs_uring_loop_same_cores")
        out["ceilings"]["pagecache_uring_loop_iops"] = get(pc, "baselines", "uring_loop_same_cores", "iops")
    hb = find(lines, "block", clients="gpu", location="hostmem", block=4096, op="read", pattern="random",
              threads=131072, gpu_touches="all")
    if hb:
        out["ratios"]["block_hostmem_4k_vs_h2d"] = get(hb, "ratios", "vs_h2d")
    cpu = find(lines, "block", clients="cpu", location="null")
    if cpu:
        out["metrics"]["controller_ns_per_request"] = get(cpu, "metrics", "controller_ns_per_request")
        out["metrics"]["controller_requests_per_poller_second"] = get(cpu, "metrics", "requests_per_poller_second")

    # Gathers: deepwell with its default configuration (the direct tier) on a
    # file in the page cache, against tiling on the same file.
    for loc in ("pagecache", "hostmem", "odirect"):
        # The best tiling configuration of the run (each line carries it).
        t = get(find(lines, "gather", location=loc, method="deepwell"), "baselines", "tiling_best")
        if t:
            for key in ("dependent_gbps", "bulk_gbps", "dependent_cpu_cores", "bulk_cpu_cores", "dependent_config",
                        "bulk_config"):
                if key in t:
                    out["baselines"][f"tiling_{loc}_{key}"] = t[key]
        for method, path in (("deepwell", "direct"), ("deepwell", "controller"), ("zero_copy", "direct"),
                             ("unified_memory", "faults")):
            g = find(lines, "gather", location=loc, method=method, path=path)
            if not g:
                continue
            name = method if method != "deepwell" else f"deepwell_{path}"
            section = "metrics" if method == "deepwell" else "baselines"
            out[section][f"gather_{loc}_{name}_dependent_gbps"] = get(g, "metrics", "dependent_gbps")
            out[section][f"gather_{loc}_{name}_bulk_gbps"] = get(g, "metrics", "bulk_gbps")
            out["ratios"][f"dependent_gather_{loc}_{name}_vs_tiling"] = get(g, "ratios", "dependent_vs_tiling")
            out["ratios"][f"bulk_gather_{loc}_{name}_vs_tiling"] = get(g, "ratios", "bulk_vs_tiling")
            if method == "deepwell":
                out["metrics"][f"gather_{loc}_{name}_bulk_cpu_cores"] = get(g, "metrics", "bulk_cpu_cores")
    head = find(lines, "gather", location="pagecache", method="deepwell", path="direct")
    put("ratios", "dependent_gather_vs_tiling", get(head, "ratios", "dependent_vs_tiling"))
    put("ratios", "bulk_gather_vs_tiling", get(head, "ratios", "bulk_vs_tiling"))

    # Hit-ratio curves: one point per pattern and path.
    curve = []
    for l in lines:
        if l.get("benchmark") == "hitratio":
            c = l["config"]
            curve.append({"pattern": f'{c["pattern"]}:{c["param"]:g}', "path": c["path"],
                          "hit_rate": get(l, "metrics", "hit_rate"), "reads_per_s": get(l, "metrics", "reads_per_s"),
                          "zero_copy_reads_per_s": get(l, "baselines", "zero_copy_reads_per_s"),
                          "hbm_reads_per_s": get(l, "baselines", "hbm_reads_per_s")})
    if curve:
        out["metrics"]["hit_ratio_curve"] = curve

    out["goals"] = {}
    for key, (section, op, target) in GOALS.items():
        value = out[section].get(key)
        met = None if value is None else (value >= target if op == ">=" else value <= target)
        out["goals"][key] = {"value": value, "goal": f"{op} {target}", "met": met}
    out["missing"] = sorted(set(missing))
    out["failures"] = failures(lines)
    out["runs"] = lines
    return out


def failures(lines: list[Line]) -> list[str]:
    """Lines that report failed requests or wrong data."""
    bad = []
    for l in lines:
        m = l.get("metrics", {})
        for key in ("failed", "wrong", "bad_words"):
            if m.get(key):
                bad.append(f'{l.get("benchmark")} {json.dumps(l.get("config", {}), sort_keys=True)}: {key}={m[key]}')
        if m.get("same_row_ids_as_tiling") is False:
            bad.append(f'{l.get("benchmark")} {json.dumps(l.get("config", {}), sort_keys=True)}: row ids differ from tiling')
    return bad


def goal_table(summary: dict) -> str:
    rows = []
    for key, g in summary["goals"].items():
        v = g["value"]
        mark = "-" if g["met"] is None else ("met" if g["met"] else "short")
        rows.append(f"{key:34s} {'missing' if v is None else f'{v:.3f}':>9s}  goal {g['goal']:7s} {mark}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+", help="benchmark JSON-lines files")
    ap.add_argument("--commit", help="commit to record (default: from the lines)")
    ap.add_argument("--config", default="{}", help="run configuration to record, as a JSON object")
    ap.add_argument("-o", "--output", help="write the summary here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        config = json.loads(args.config)
        summary = summarize(load_lines(args.jsonl), args.commit, config)
    except (OSError, ValueError) as e:
        print(f"summarize: {e}", file=sys.stderr)
        return 2
    text = json.dumps(summary, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print(goal_table(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
