"""The taxi queries' times by method, from a recorded taxi-bench result
(bench/probes/taxi-bench's taxi.json, or bench/results/*-taxi.json): one SVG.

    python3 bench/plot_taxi.py RESULT.json [--out docs/taxi.svg]

Needs matplotlib. Every bar is a measured time of the same run; DuckDB is
drawn warm and cold (page cache dropped).
"""
import argparse
import json

METHODS = [("deepwell", None, "deepwell (direct tier)"), ("deepwell-queued", None, "deepwell (controller)"),
           ("tiling", None, "column tiling"), ("zerocopy", None, "zero-copy"), ("floor", None, "in GPU memory (floor)"),
           ("duckdb", "warm", "DuckDB warm"), ("duckdb", "cold", "DuckDB cold")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result")
    ap.add_argument("--out", default="docs/taxi.svg")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = json.load(open(a.result))
    queries = sorted({r["query"] for r in res["runs"] if "seconds" in r})
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(METHODS)
    for k, (method, run, label) in enumerate(METHODS):
        ys = []
        for q in queries:
            t = [r["seconds"] for r in res["runs"]
                 if r.get("method") == method and r.get("query") == q and (run is None or r.get("run") == run)]
            ys.append(t[0] * 1e3 if t else 0)
        if any(ys):
            ax.bar([q + (k - len(METHODS) / 2 + 0.5) * width for q in queries], ys, width, label=label)
    ax.set_xticks(queries)
    ax.set_xticklabels([f"Q{q}" for q in queries])
    ax.set_yscale("log")
    ax.set_ylabel("milliseconds (log)")
    ax.set_title(f"Taxi queries, {res['rows']:,} trips, page cache warm\n"
                 f"{res.get('device', '?')}, commit {res.get('commit', '?')}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(a.out)
    print(a.out)


if __name__ == "__main__":
    main()
