#!/usr/bin/env python3
"""Data-parallel GraphSAGE (torch.distributed, NCCL), one process per GPU, every
process's feature loading served by one `deepwell serve`.

The graph and the N x D float32 feature file are examples/graphsage.py's
(generated, deterministic). Unless --socket names a running server, this
script starts one: the feature file as a dataset (O_DIRECT with --odirect),
with a host-memory tier (--host-cache) that the GPUs share, granted to
this user. Each process connects (deepwell.connect), opens the dataset by
name on its own GPU with a cache of its own, samples its share of every
epoch's mini-batches on its GPU, loads their features through deepwell and
trains a DistributedDataParallel model; gradients are averaged over NCCL.

  python3 examples/graphsage_ddp.py --gpus 2                 # two GPUs
  python3 examples/graphsage_ddp.py --gpus 1,2 --out r.json  # one, then two: ddp_epoch_scaling

An epoch is the same --batches x --batch training seeds on any number of
GPUs. How they are split (--split): "seeds" (the default, as
torch.utils.data.DistributedSampler does) gives each process its share of
the epoch's seeds in mini-batches of --batch, so N GPUs take 1/N of the
steps; "batch" keeps the global mini-batch at --batch and splits each one
over the GPUs (every GPU takes every step, on 1/N of the seeds).
With --gpus 1,2 it runs the epochs on one GPU and on two, and reports
ddp_epoch_scaling = epoch time on one / on two (issue 15's goal: >= 1.8),
for the --split asked for; --split seeds,batch runs both (one GPU's run is
the same for both) and reports the second as
ddp_epoch_scaling_fixed_global_batch. The first epoch of each run warms the caches and
the tier; the last one is compared. Every process checks the first rows it
loads against the file (numpy.memmap): feature loading through the server
must give the file's bytes.
"""
import argparse
import json
import os
import shutil
import socket as socketlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphsage import SAGE, make_features, make_graph  # noqa: E402  (the single-GPU example's parts)

import deepwell  # noqa: E402
from deepwell.gnn import FeatureLoader  # noqa: E402
from deepwell.sampler import NeighborSampler  # noqa: E402


def free_port():
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, path, workdir):
    """deepwell serve over the feature file; returns (process, socket path)."""
    exe = args.deepwell or shutil.which("deepwell")
    if not exe:
        sys.exit("graphsage_ddp.py: no `deepwell` binary (build it, put it on PATH or pass --deepwell)")
    sock = os.path.join(workdir, "deepwell.sock")
    cfg = os.path.join(workdir, "datasets.toml")
    lines = ["[server]", f'socket = "{sock}"', f"pollers = {args.pollers}"]
    if args.host_cache:
        lines.append(f'host_cache = "{args.host_cache}"')
    lines += ["", "[[dataset]]", 'name = "features"', f'file = "{path}"', "block_size = 4096",
              f"direct = {'true' if args.odirect else 'false'}",
              "", "[[grant]]", 'dataset = "features"', f"uid = {os.getuid()}", 'access = "read"', ""]
    with open(cfg, "w") as f:
        f.write("\n".join(lines))
    log = open(os.path.join(workdir, "serve.log"), "w")
    p = subprocess.Popen([exe, "serve", "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if os.path.exists(sock) or p.poll() is not None:
            break
        time.sleep(0.05)
    if p.poll() is not None or not os.path.exists(sock):
        p.kill()
        sys.exit(f"graphsage_ddp.py: deepwell serve did not start (see {log.name})")
    return p, sock


def worker(rank, world, args, path, sock, port, results, split):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device(f"cuda:{rank}"))
    rowptr, col = make_graph(args.nodes, args.degree, args.seed)  # the same graph on every GPU (seeded)
    labels = make_features(path, args.nodes, args.dim, args.classes, args.seed)
    deepwell.connect(sock)
    feats = deepwell.open("features", dtype="float32", shape=(-1, args.dim), cache_size=args.cache,
                          device=f"cuda:{rank}")
    load = FeatureLoader(feats).load
    sampler = NeighborSampler(rowptr, col, [int(f) for f in args.fanouts.split(",")])
    train = torch.randperm(args.nodes, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
    train = train[: args.batch * args.batches]
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(SAGE(args.dim, args.hidden, args.classes).cuda(),
                                                      device_ids=[rank])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=(args.nodes, args.dim))
    wrong_rows = 0
    epochs = []
    for e in range(args.epochs):
        g = torch.Generator(device="cuda").manual_seed(1000 + e)  # the same global order on every GPU
        sampler.generator = torch.Generator(device="cuda").manual_seed(7000 + 100 * e + rank)
        order = train[torch.randperm(train.numel(), device="cuda", generator=g)]
        t = {"sampling_s": 0.0, "loading_s": 0.0, "training_s": 0.0, "rows_loaded": 0}
        dist.barrier()
        torch.cuda.synchronize()
        t_start = time.perf_counter()
        if split == "seeds":  # step b: this rank's batch of the world * args.batch seeds of step b
            per, steps = args.batch, args.batches // world
        else:  # step b: this rank's slice of global batch b
            per, steps = args.batch // world, args.batches
        for b in range(steps):
            seeds = order[(b * world + rank) * per:(b * world + rank + 1) * per]
            t0 = time.perf_counter()
            sub = sampler.sample(seeds)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            x = load(sub.n_id)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if e == 0 and b == 0:  # the server gave the file's bytes
                ids = sub.n_id[:256].cpu().numpy()
                wrong_rows += int((~np.all(x[:256].cpu().numpy() == mm[ids], axis=1)).sum())
            opt.zero_grad()
            out = model(x, sub.edge_index)[: sub.batch_size]
            loss = F.cross_entropy(out, labels[seeds])
            loss.backward()  # gradients averaged over NCCL
            opt.step()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            t["sampling_s"] += t1 - t0
            t["loading_s"] += t2 - t1
            t["training_s"] += t3 - t2
            t["rows_loaded"] += int(sub.n_id.numel())
        dist.barrier()
        t["epoch_s"] = time.perf_counter() - t_start
        t["loss"] = float(loss.item())
        epochs.append(t)
        if rank == 0:
            print(f"{world} GPU(s) epoch {e}: {t['epoch_s']:.2f} s (rank 0: sampling {t['sampling_s']:.2f}, loading "
                  f"{t['loading_s']:.2f}, training {t['training_s']:.2f}); loss {t['loss']:.3f}", flush=True)
    stats = feats.stats()
    feats.close()
    results[rank] = {"epochs": epochs, "wrong_rows": wrong_rows, "deepwell_stats": stats,
                     "device": torch.cuda.get_device_name(rank)}
    dist.destroy_process_group()


# The runs' keys in the output: the first split's by GPU count ("1", "2"),
# a later split's with its name ("2-batch"); one GPU runs once.
def run_key(gpus, i, split):
    return str(gpus) if i == 0 or gpus == 1 else f"{gpus}-{split}"


# The figure each split's scaling is reported as, after the first's.
LATER_SPLIT_FIGURE = {"batch": "ddp_epoch_scaling_fixed_global_batch", "seeds": "ddp_epoch_scaling_split_seeds"}


def run(world, args, path, sock, split):
    port = free_port()
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(worker, args=(world, args, path, sock, port, results, split), nprocs=world, join=True)
        return dict(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="", help="GPU counts to run, e.g. '2' or '1,2' (default: all visible)")
    ap.add_argument("--nodes", type=int, default=2 << 20)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--cache", default="1GiB", help="each GPU's deepwell cache")
    ap.add_argument("--batch", type=int, default=2048,
                    help="seeds per mini-batch: each process's (--split seeds) or the global one's (--split batch)")
    ap.add_argument("--split", default="seeds",
                    help="how the epoch is shared among GPUs: seeds, batch, or seeds,batch for both (see above)")
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batches", type=int, default=40, help="an epoch is --batches x --batch seeds")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--socket", default=None, help="a running deepwell server offering 'features' (else one is started)")
    ap.add_argument("--deepwell", default=None, help="the deepwell binary (default: on PATH)")
    ap.add_argument("--pollers", type=int, default=4)
    ap.add_argument("--host-cache", default="", help="the started server's host tier (e.g. '10GiB'; default none)")
    ap.add_argument("--odirect", action="store_true", help="the started server reads the file with O_DIRECT")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n = torch.cuda.device_count()
    if n == 0:
        sys.exit("graphsage_ddp.py needs CUDA GPUs")
    counts = [int(c) for c in args.gpus.split(",")] if args.gpus else [n]
    if max(counts) > n:
        sys.exit(f"graphsage_ddp.py: {max(counts)} GPUs asked for, {n} visible")
    splits = args.split.split(",")
    if any(sp not in ("seeds", "batch") for sp in splits):
        sys.exit(f"--split {args.split}: each must be 'seeds' or 'batch'")
    if "batch" in splits and any(args.batch % c for c in counts):
        sys.exit(f"--split batch: --batch {args.batch} must divide among {counts} GPUs")
    if "seeds" in splits and any(args.batches % c for c in counts):
        sys.exit(f"--split seeds: --batches {args.batches} must divide among {counts} GPUs")
    path = os.path.join(args.dir, f"graphsage-{args.nodes}x{args.dim}-s{args.seed}.f32")
    make_features(path, args.nodes, args.dim, args.classes, args.seed)  # once, before the workers
    server, workdir = None, None
    sock = args.socket
    if not sock:
        workdir = tempfile.mkdtemp(prefix="deepwell-ddp-")
        server, sock = start_server(args, path, workdir)
    out = {"config": vars(args), "runs": {}}
    try:
        for i, sp in enumerate(splits):
            for c in counts:
                if c == 1 and i > 0:
                    continue  # one GPU: the same run for every split
                key = run_key(c, i, sp)
                print(f"{c} GPU(s), split {sp}:", flush=True)
                r = run(c, args, path, sock, sp)
                out["runs"][key] = r
                if any(v["wrong_rows"] for v in r.values()):
                    print(f"{c} GPU(s): features that differ from the file!", flush=True)
        if server is not None:
            out["server_stats"] = deepwell.connect(sock).stats()
            deepwell.disconnect()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    last = {c: max(v["epochs"][-1]["epoch_s"] for v in r.values()) for c, r in out["runs"].items()}
    top = max(counts)
    if "1" in last and top > 1:
        for i, sp in enumerate(splits):
            name = "ddp_epoch_scaling" if i == 0 else LATER_SPLIT_FIGURE[sp]
            out[name] = last["1"] / last[run_key(top, i, sp)]
            print(f"{name} ({top} GPUs against 1, split {sp}): {out[name]:.2f}", flush=True)
    wrong = sum(v["wrong_rows"] for r in out["runs"].values() for v in r.values())
    out["wrong_rows"] = wrong
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
