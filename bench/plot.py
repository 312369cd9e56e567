"""Plots from a benchmark summary (scripts/bench's bench-summary.json, or a
recorded bench/results/*-bench.json): SVG files, one per figure.

    python3 bench/plot.py SUMMARY.json [--out DIR]

Needs matplotlib (pip install matplotlib). Every point is a measured value
from the summary's runs; the ceilings drawn are those of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import summarize  # bench/summarize.py, beside this file


def runs(summary: dict, benchmark: str, **config) -> list[dict]:
    return summarize.select(summary.get("runs", []), benchmark, **config)


def title(summary: dict, what: str) -> str:
    return f"{what}\n{summary.get('device', '?')}, commit {summary.get('commit', '?')}"


def plot_block(plt, summary: dict, out: str) -> list[str]:
    made = []
    link = summary["ceilings"].get("h2d_memcpy_gbps")
    threads = sorted(runs(summary, "block", clients="gpu", location="hostmem", block=4096, op="read", pattern="random",
                          gpu_touches="all"),
                     key=lambda l: l["config"]["threads"])
    if len(threads) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [l["config"]["threads"] for l in threads]
        ax.plot(xs, [l["metrics"]["gbps"] for l in threads], "o-", label="deepwell queues, host memory, 4 KiB random")
        if link:
            ax.axhline(link, color="gray", ls="--", label="cudaMemcpy H2D (same run)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPU threads issuing requests")
        ax.set_ylabel("GB/s")
        ax.set_title(title(summary, "Block reads through the controller"))
        ax.legend(fontsize=8)
        made.append(save(fig, out, "block-threads.svg"))
    sizes = {}
    for l in runs(summary, "block", clients="gpu", location="hostmem", threads=131072, op="read", pattern="random",
                  gpu_touches="all"):
        sizes[l["config"]["block"]] = l
    if len(sizes) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = sorted(sizes)
        ax.plot(xs, [sizes[x]["metrics"]["gbps"] for x in xs], "o-", label="GB/s")
        if link:
            ax.axhline(link, color="gray", ls="--", label="cudaMemcpy H2D (same run)")
        ax2 = ax.twinx()
        ax2.plot(xs, [sizes[x]["metrics"]["iops"] / 1e6 for x in xs], "s:", color="C1", label="M IOPS")
        ax2.set_ylabel("M IOPS")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("request bytes")
        ax.set_ylabel("GB/s")
        ax.set_title(title(summary, "Block reads by request size (131072 GPU threads)"))
        ax.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="lower right", fontsize=8)
        made.append(save(fig, out, "block-sizes.svg"))
    return made


def plot_array_miss(plt, summary: dict, out: str) -> list[str]:
    link = summary["ceilings"].get("h2d_memcpy_gbps")
    series = {}
    for l in runs(summary, "array", mode="all-miss", location="hostmem"):
        series.setdefault(f'deepwell, {l["config"]["path"]}', {})[l["config"]["page_size"]] = l["metrics"]["gbps"]
    for l in runs(summary, "array", mode="all-miss-baseline", method="zero_copy"):
        series.setdefault("zero-copy reads (EMOGI)", {})[l["config"]["page_size"]] = l["metrics"]["gbps"]
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in series.items():
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], "o-", label=name)
    if link:
        ax.axhline(link, color="gray", ls="--", label="cudaMemcpy H2D (same run)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("page bytes")
    ax.set_ylabel("GB/s of pages fetched")
    ax.set_title(title(summary, "All-miss reads of a host-memory dataset"))
    ax.legend(fontsize=8)
    return [save(fig, out, "array-miss-pages.svg")]


def plot_hitratio(plt, summary: dict, out: str) -> list[str]:
    pts = runs(summary, "hitratio", pattern="hot")
    if not pts:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for path in sorted({l["config"]["path"] for l in pts}):
        mine = sorted((l for l in pts if l["config"]["path"] == path), key=lambda l: l["metrics"]["hit_rate"])
        ax.plot([l["metrics"]["hit_rate"] for l in mine], [l["metrics"]["reads_per_s"] / 1e6 for l in mine], "o-",
                label=f"deepwell a[i], {path}")
    ref = sorted(pts, key=lambda l: l["config"]["param"])
    ax.plot([l["config"]["param"] for l in ref], [l["baselines"]["zero_copy_reads_per_s"] / 1e6 for l in ref], "s--",
            label="zero-copy loads (same indices)")
    ax.plot([l["config"]["param"] for l in ref], [l["baselines"]["hbm_reads_per_s"] / 1e6 for l in ref], "^:",
            label="device memory (same indices)")
    for l in runs(summary, "hitratio", pattern="zipf"):
        ax.plot([l["metrics"]["hit_rate"]], [l["metrics"]["reads_per_s"] / 1e6], "x", color="k")
        ax.annotate(f'zipf {l["config"]["param"]:g} {l["config"]["path"][:4]}',
                    (l["metrics"]["hit_rate"], l["metrics"]["reads_per_s"] / 1e6), fontsize=6)
    ax.set_yscale("log")
    ax.set_xlabel("cache hit rate (measured; zero-copy and HBM at the hot fraction)")
    ax.set_ylabel("M random 8-byte reads/s")
    ax.set_title(title(summary, "Reads against hit ratio"))
    ax.legend(fontsize=7)
    return [save(fig, out, "hit-ratio.svg")]


def plot_gather(plt, summary: dict, out: str) -> list[str]:
    lines = [l for l in runs(summary, "gather") if l["config"]["method"] != "tiling"]
    if not lines:
        return []
    labels = [f'{l["config"]["location"]}\n{l["config"]["method"].replace("_", " ")}\n{l["config"]["path"]}' for l in lines]
    fig, ax = plt.subplots(figsize=(max(6, len(lines) * 0.9), 4))
    x = range(len(lines))
    ax.bar([i - 0.2 for i in x], [l["ratios"]["dependent_vs_tiling"] for l in lines], 0.4, label="dependent (multi-hop)")
    ax.bar([i + 0.2 for i in x], [l["ratios"]["bulk_vs_tiling"] for l in lines], 0.4, label="bulk")
    ax.axhline(1, color="gray", ls="--")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel("speed / tiling baseline (same run)")
    ax.set_title(title(summary, "Row gathers against CPU tiling"))
    ax.legend(fontsize=8)
    return [save(fig, out, "gather.svg")]


def save(fig, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary")
    ap.add_argument("--out", default="plots")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    with open(args.summary) as f:
        summary = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    made = []
    for fn in (plot_block, plot_array_miss, plot_hitratio, plot_gather):
        made += fn(plt, summary, args.out)
    for m in made:
        print(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
