#!/usr/bin/env python3
"""Gathers of random 4 KiB rows from Python: deepwell against what a Python
user would pick instead, in one run on one GPU (issue 6's goals).

  warm  the file in the page cache; numpy.memmap (pages and page tables
        resident) + torch index + copy to the GPU, against deepwell.gather
        (default: the direct tier) for batches of 1 K, 10 K and 100 K rows;
        fresh random rows every repetition, the same rows for both.
  cold  the file dropped from the page cache: deepwell with O_DIRECT against
        a plain io_uring loop reading the same rows with O_DIRECT (the
        disk's ceiling), and memmap (fewer rows: page faults are slow).
  overhead  host time of one gather call of 1 K rows (check=False), against
        the bare ctypes call underneath.

Writes one JSON summary (commit, device, config, metrics, baselines, ratios).
The data file is generated deterministically if missing (word i = i * K).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

import deepwell
from deepwell import _lib
from deepwell.baselines import MemmapLoader, drop_from_page_cache, uring_read_rows

K = 0x9E3779B97F4A7C15


def make_file(path, rows, row_bytes):
    size = rows * row_bytes
    if os.path.exists(path) and os.path.getsize(path) == size:
        return False
    words = row_bytes // 8
    chunk = max(1, (256 << 20) // row_bytes)
    with open(path, "wb") as f:
        for b in range(0, rows, chunk):
            n = min(chunk, rows - b)
            w = np.arange(b * words, (b + n) * words, dtype=np.uint64) * np.uint64(K)
            f.write(w.tobytes())
    return True


def sync():
    torch.cuda.synchronize()


def timed(fn):
    sync()
    t = time.perf_counter()
    r = fn()
    sync()
    return time.perf_counter() - t, r


def h2d_gbps():
    src = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    best = 0.0
    for _ in range(3):
        t, _ = timed(lambda: dst.copy_(src, non_blocking=True))
        best = max(best, src.numel() / t / 1e9)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="/var/tmp/deepwell-py-rows.dat")
    ap.add_argument("--rows", type=int, default=2 << 20, help="rows of 4 KiB (default 2 Mi: 8 GiB)")
    ap.add_argument("--cache", default="1GiB")
    ap.add_argument("--batches", default="1000,10000,100000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cold-rows", type=int, default=50000)
    ap.add_argument("--cold-memmap-rows", type=int, default=5000)
    ap.add_argument("--commit", default=os.environ.get("COMMIT", "unknown"))
    ap.add_argument("--out", default="python-bench.json")
    args = ap.parse_args()
    rb = 4096
    words = rb // 8
    t0 = time.perf_counter()
    made = make_file(args.file, args.rows, rb)
    gen_s = time.perf_counter() - t0
    dev = torch.cuda.get_device_name()
    res = {"commit": args.commit, "device": dev, "config": vars(args) | {"row_bytes": rb, "generated": made,
                                                                         "generate_seconds": gen_s},
           "metrics": {}, "baselines": {}, "ceilings": {"h2d_gbps": h2d_gbps()}, "ratios": {}, "checks": {}}
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [int(b) for b in args.batches.split(",")]

    # ---- warm ----
    mm = MemmapLoader(args.file, np.uint8, (args.rows, rb))
    t, _ = timed(mm.warm)
    res["config"]["memmap_warm_seconds"] = t
    warm = {}
    with deepwell.open(args.file, dtype="uint8", shape=(-1, rb), cache_size=args.cache) as a, \
            deepwell.open(args.file, dtype="uint8", shape=(-1, rb), cache_size=args.cache, direct="never") as c, \
            deepwell.open(args.file, dtype="uint8", shape=(-1, rb), cache_size="64MiB", cache_reads=False) as p:
        res["config"]["direct_tier"] = a.direct_tier
        for n in batches:
            row = {"rows": n}
            for name, fn in (("memmap", lambda ids: mm.gather(ids)),
                             ("deepwell", lambda ids: a.gather(ids)),
                             ("deepwell_controller", lambda ids: c.gather(ids)),
                             ("deepwell_in_place", lambda ids: p.gather(ids))):
                times = []
                for rep in range(args.reps + 1):
                    ids = torch.randint(0, args.rows, (n,), device="cuda", generator=g)
                    t, out = timed(lambda: fn(ids))
                    if rep:
                        times.append(t)
                    del out
                row[name + "_s"] = statistics.median(times)
                row[name + "_gbps"] = n * rb / row[name + "_s"] / 1e9
            row["deepwell_vs_memmap"] = row["memmap_s"] / row["deepwell_s"]
            row["deepwell_in_place_vs_memmap"] = row["memmap_s"] / row["deepwell_in_place_s"]
            warm[n] = row
            print(f"warm {n:>7} rows: memmap {row['memmap_gbps']:.2f} GB/s, deepwell {row['deepwell_gbps']:.2f} GB/s "
                  f"(x{row['deepwell_vs_memmap']:.1f}), in place {row['deepwell_in_place_gbps']:.2f} "
                  f"(x{row['deepwell_in_place_vs_memmap']:.1f}), through the controller "
                  f"{row['deepwell_controller_gbps']:.2f}",
                  flush=True)
        # Byte-for-byte: one batch, every method, against the generator's formula.
        ids = torch.randint(0, args.rows, (2000,), device="cuda", generator=g)
        ref = mm.gather(ids)
        lo = ids.cpu().numpy().astype(np.uint64) * np.uint64(words)
        expect = ((lo[:, None] + np.arange(words, dtype=np.uint64)) * np.uint64(K)).view(np.uint8).reshape(-1, rb)
        res["checks"]["memmap_equals_formula"] = bool(np.array_equal(ref.cpu().numpy(), expect))
        res["checks"]["deepwell_equals_memmap"] = bool(torch.equal(a.gather(ids), ref))
        res["checks"]["deepwell_controller_equals_memmap"] = bool(torch.equal(c.gather(ids), ref))
        res["checks"]["deepwell_in_place_equals_memmap"] = bool(torch.equal(p.gather(ids), ref))
        res["metrics"]["warm_stats_direct"] = a.stats()

        # ---- overhead of one call (1 K rows, no wait) ----
        ids = torch.randint(0, args.rows, (1000,), device="cuda", generator=g)
        out = torch.empty(1000, rb, dtype=torch.uint8, device="cuda")
        a.gather(ids, out=out)
        per_call, raw = [], []
        h, s = a._hv, torch.cuda.current_stream().cuda_stream
        for i in range(2000):
            t = time.perf_counter()
            a.gather(ids, out=out, check=False)
            per_call.append(time.perf_counter() - t)
            t = time.perf_counter()
            _lib.lib.dw_array_gather(h, ids.data_ptr(), 64, 0, 1000, out.data_ptr(), s)
            raw.append(time.perf_counter() - t)
            if i % 50 == 0:
                a.check()
        a.check()
        # Where a checked 1 K-row gather's time goes: the kernel (CUDA events), the whole call with its wait.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def event_us(array):  # a fresh 1 K-row batch; includes the host call between the events
            ids = torch.randint(0, args.rows, (1000,), device="cuda", generator=g)
            sync()
            start.record()
            array.gather(ids, out=out, check=False)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3

        kernel, checked, in_place, allocated, timed_us = [], [], [], [], []
        for i in range(200):
            in_place.append(event_us(p))
            kernel.append(event_us(a))
            ids = torch.randint(0, args.rows, (1000,), device="cuda", generator=g)
            sync()
            t = time.perf_counter()
            a.gather(ids, out=out)
            checked.append((time.perf_counter() - t) * 1e6)
            # The warm loop's call: a new output, checked; then as timed() sees it.
            ids = torch.randint(0, args.rows, (1000,), device="cuda", generator=g)
            sync()
            t = time.perf_counter()
            r = a.gather(ids)
            allocated.append((time.perf_counter() - t) * 1e6)
            del r
            ids = torch.randint(0, args.rows, (1000,), device="cuda", generator=g)
            timed_us.append(timed(lambda: a.gather(ids))[0] * 1e6)
        res["metrics"]["gather_1k_kernel_us"] = statistics.median(kernel)
        res["metrics"]["gather_1k_in_place_kernel_us"] = statistics.median(in_place)
        res["metrics"]["gather_1k_checked_call_us"] = statistics.median(checked)
        res["metrics"]["gather_1k_new_out_checked_call_us"] = statistics.median(allocated)
        res["metrics"]["gather_1k_timed_us"] = statistics.median(timed_us)
        res["metrics"]["gather_call_us_1k"] = statistics.median(per_call) * 1e6
        res["metrics"]["gather_c_call_us_1k"] = statistics.median(raw) * 1e6
        print(f"one gather call of 1 K rows: {res['metrics']['gather_call_us_1k']:.1f} us from Python "
              f"({res['metrics']['gather_c_call_us_1k']:.1f} us in the C call); with its wait "
              f"{res['metrics']['gather_1k_checked_call_us']:.1f} us, kernel {res['metrics']['gather_1k_kernel_us']:.1f} us "
              f"(in place {res['metrics']['gather_1k_in_place_kernel_us']:.1f} us); with a new output "
              f"{res['metrics']['gather_1k_new_out_checked_call_us']:.1f} us, as the warm loop times it "
              f"{res['metrics']['gather_1k_timed_us']:.1f} us",
              flush=True)
    res["baselines"]["warm"] = {str(k): v for k, v in warm.items()}
    res["ratios"]["gather_warm_vs_memmap"] = min(v["deepwell_vs_memmap"] for v in warm.values())
    res["ratios"]["gather_warm_vs_memmap_by_batch"] = {str(k): v["deepwell_vs_memmap"] for k, v in warm.items()}
    res["ratios"]["gather_warm_in_place_vs_memmap"] = min(v["deepwell_in_place_vs_memmap"] for v in warm.values())
    res["ratios"]["gather_warm_in_place_vs_memmap_by_batch"] = {
        str(k): v["deepwell_in_place_vs_memmap"] for k, v in warm.items()}
    mm = None  # unmap before the file is dropped

    # ---- cold ----
    rng = np.random.default_rng(7)
    rows = rng.integers(0, args.rows, args.cold_rows)
    cold = {}
    best = None
    for threads, depth in ((4, 64), (8, 128), (16, 64)):
        drop_from_page_cache(args.file)
        t = uring_read_rows(args.file, rows, rb, odirect=True, depth=depth, threads=threads)
        cold[f"uring_{threads}x{depth}_s"] = t
        best = t if best is None else min(best, t)
    cold["uring_best_s"] = best
    drop_from_page_cache(args.file)
    with deepwell.open(args.file, dtype="uint8", shape=(-1, rb), cache_size=args.cache, odirect=True,
                       pollers=4) as d:
        ids = torch.from_numpy(rows).cuda()
        d.gather(ids[:1000])  # warm-up of the kernel and queues
        d.clear()
        t, out = timed(lambda: d.gather(ids))
        cold["deepwell_odirect_s"] = t
        cold["deepwell_stats"] = d.stats()
        drop_from_page_cache(args.file)
        check_rows = torch.from_numpy(rows[:2000]).cuda()
        mm2 = MemmapLoader(args.file, np.uint8, (args.rows, rb))
        res["checks"]["cold_deepwell_equals_memmap"] = bool(torch.equal(out[:2000], mm2.gather(check_rows)))
        mm2 = None
    # Skewed rows from the disk (hubs: rank = N * u^4, the top 5% of ranks take 47% of the reads; ranks
    # scattered over the file by a permutation, as hubs are in a real graph) through a small GPU cache,
    # with and without the hottest 5% of rows in a pinned host buffer (GIDS' CPU buffer).
    from deepwell.gnn import FeatureLoader
    cpu_gen = torch.Generator().manual_seed(3)
    perm = torch.randperm(args.rows, generator=cpu_gen)
    u = torch.rand(args.cold_rows // 2, generator=cpu_gen, dtype=torch.float64)
    skewed = perm[(u ** 4 * args.rows).long().clamp(max=args.rows - 1)].cuda()
    hottest = perm[: args.rows // 20].cuda()
    drop_from_page_cache(args.file)
    with deepwell.open(args.file, dtype="uint8", shape=(-1, rb), cache_size="64MiB", odirect=True,
                       pollers=4) as d:
        plain = FeatureLoader(d)
        d.clear()
        t, ref = timed(lambda: plain.load(skewed))
        cold["skewed_plain_s"] = t
        t, hot = timed(lambda: FeatureLoader(d, hot_rows=hottest))
        cold["hot_buffer_fill_s"] = t
        d.clear()
        t, got = timed(lambda: hot.load(skewed))
        cold["skewed_hot_buffer_s"] = t
        cold["skewed_hot_share"] = hot.hot_hits / hot.loaded
        res["checks"]["hot_buffer_equals_plain"] = bool(torch.equal(got, ref))
        hot.close()
    res["ratios"]["cold_skewed_hot_buffer_vs_plain"] = cold["skewed_plain_s"] / cold["skewed_hot_buffer_s"]
    print(f"cold skewed {skewed.numel()} rows: hot buffer of 5% of rows x"
          f"{res['ratios']['cold_skewed_hot_buffer_vs_plain']:.2f} ({cold['skewed_hot_share']:.0%} of reads from it)",
          flush=True)
    drop_from_page_cache(args.file)
    mm3 = MemmapLoader(args.file, np.uint8, (args.rows, rb))
    few = torch.from_numpy(rows[: args.cold_memmap_rows]).cuda()
    t, _ = timed(lambda: mm3.gather(few))
    cold["memmap_s_per_row"] = t / args.cold_memmap_rows
    mm3 = None
    cold["deepwell_s_per_row"] = cold["deepwell_odirect_s"] / args.cold_rows
    cold["deepwell_kiops"] = args.cold_rows / cold["deepwell_odirect_s"] / 1e3
    cold["uring_kiops"] = args.cold_rows / best / 1e3
    res["baselines"]["cold"] = cold
    res["ratios"]["gather_cold_vs_uring"] = best / cold["deepwell_odirect_s"]
    res["ratios"]["gather_cold_vs_memmap"] = cold["memmap_s_per_row"] / cold["deepwell_s_per_row"]
    print(f"cold {args.cold_rows} rows: deepwell O_DIRECT {cold['deepwell_kiops']:.1f} K rows/s, io_uring "
          f"{cold['uring_kiops']:.1f} K rows/s (x{res['ratios']['gather_cold_vs_uring']:.2f}), memmap "
          f"{1 / cold['memmap_s_per_row'] / 1e3:.1f} K rows/s", flush=True)
    res["goals"] = {
        "gather_warm_vs_memmap": [res["ratios"]["gather_warm_vs_memmap"], ">= 10"],
        "gather_warm_in_place_vs_memmap": [res["ratios"]["gather_warm_in_place_vs_memmap"], ">= 10"],
        "gather_cold_vs_uring": [res["ratios"]["gather_cold_vs_uring"], ">= 0.8"],
        "gather_call_us_1k": [res["metrics"]["gather_call_us_1k"], "< 50"],
    }
    res["checks"]["all"] = all(v for k, v in res["checks"].items() if k != "all")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({"ratios": res["ratios"], "checks": res["checks"]}))
    return 0 if res["checks"]["all"] else 1


if __name__ == "__main__":
    sys.exit(main())
