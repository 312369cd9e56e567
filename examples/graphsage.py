#!/usr/bin/env python3
"""GraphSAGE with neighbour sampling, node features on storage.

A generated graph (skewed degrees, like real graphs) whose N x D float32
features live in a file several times larger than deepwell's cache. Each
epoch samples mini-batches on the GPU (deepwell.sampler), loads the sampled
nodes' features, and trains two SAGEConv layers (PyTorch Geometric). The
same batches run with deepwell's loader and with the numpy.memmap loader
(the baseline GIDS compared with), from the same warm page cache; the time of
each epoch is split into sampling, feature loading and training.

  python3 examples/graphsage.py                      # 2 Mi nodes x 1024 floats: an 8 GiB file, 1 GiB cache
  python3 examples/graphsage.py --nodes 200000 --cache 128MiB   # small
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import deepwell
from deepwell.baselines import MemmapLoader
from deepwell.gnn import FeatureLoader
from deepwell.sampler import NeighborSampler


def make_graph(n, degree, seed):
    """Every node gets `degree` out-edges to targets drawn with a skew towards low ids (hubs), both ways."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    src = torch.arange(n, device="cuda").repeat_interleave(degree)
    dst = (torch.rand(src.numel(), device="cuda", generator=g) ** 3 * n).long().clamp(max=n - 1)
    perm = torch.randperm(n, device="cuda", generator=g)  # hubs spread over the id space
    src, dst = torch.cat([src, perm[dst]]), torch.cat([perm[dst], src])
    order = torch.argsort(src)
    col = dst[order]
    rowptr = torch.zeros(n + 1, dtype=torch.int64, device="cuda")
    rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    return rowptr, col


def make_features(path, n, dim, classes, seed):
    """Features N(0,1) from a seeded generator per chunk; the label of a node is the argmax of its first
    `classes` features (learnable). Written once; the labels are recomputed from the file's first columns."""
    chunk = max(1, (256 << 20) // (dim * 4))
    if not (os.path.exists(path) and os.path.getsize(path) == n * dim * 4):
        with open(path, "wb") as f:
            for b in range(0, n, chunk):
                g = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + b)
                torch.randn(min(chunk, n - b), dim, device="cuda", generator=g).cpu().numpy().tofile(f)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=(n, dim))
    labels = torch.empty(n, dtype=torch.int64)
    for b in range(0, n, chunk):
        labels[b:b + chunk] = torch.from_numpy(np.array(mm[b:b + chunk, :classes])).argmax(1)
    return labels.cuda()


class SAGE(torch.nn.Module):
    def __init__(self, dim, hidden, classes):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.c1 = SAGEConv(dim, hidden)
        self.c2 = SAGEConv(hidden, classes)

    def forward(self, x, edge_index):
        return self.c2(F.relu(self.c1(x, edge_index)), edge_index)


def run_epoch(load, sampler, model, opt, labels, train, args, epoch):
    """One epoch; returns seconds of sampling, loading and training, and the first batch's features."""
    g = torch.Generator(device="cuda").manual_seed(1000 + epoch)  # the same batches for every loader
    sampler.generator = g
    order = train[torch.randperm(train.numel(), device="cuda", generator=g)]
    t = {"sampling_s": 0.0, "loading_s": 0.0, "training_s": 0.0, "rows_loaded": 0, "loss": 0.0}
    first = None
    for b in range(args.batches):
        seeds = order[b * args.batch:(b + 1) * args.batch]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sub = sampler.sample(seeds)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        x = load(sub.n_id)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        opt.zero_grad()
        out = model(x, sub.edge_index)[: sub.batch_size]
        loss = F.cross_entropy(out, labels[seeds])
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        t["sampling_s"] += t1 - t0
        t["loading_s"] += t2 - t1
        t["training_s"] += t3 - t2
        t["rows_loaded"] += int(sub.n_id.numel())
        t["loss"] = loss.item()
        if first is None:
            first = (sub.n_id, x[:2048].clone())
    t["epoch_s"] = t["sampling_s"] + t["loading_s"] + t["training_s"]
    return t, first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2 << 20)
    ap.add_argument("--dim", type=int, default=1024, help="float32 features per node (1024: 4 KiB rows)")
    ap.add_argument("--degree", type=int, default=8, help="out-edges generated per node (the graph is symmetric)")
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--cache", default="1GiB", help="deepwell's cache (GPU memory)")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batches", type=int, default=40, help="mini-batches per epoch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--loaders", default="deepwell,memmap")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("graphsage.py needs a CUDA GPU")
    path = os.path.join(args.dir, f"graphsage-{args.nodes}x{args.dim}-s{args.seed}.f32")
    t0 = time.perf_counter()
    rowptr, col = make_graph(args.nodes, args.degree, args.seed)
    labels = make_features(path, args.nodes, args.dim, args.classes, args.seed)
    setup_s = time.perf_counter() - t0
    train = torch.randperm(args.nodes, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
    train = train[: args.batch * args.batches]
    sampler = NeighborSampler(rowptr, col, [int(f) for f in args.fanouts.split(",")])
    file_gib = args.nodes * args.dim * 4 / 2**30
    print(f"graph: {args.nodes} nodes, {col.numel()} edges; features {path} ({file_gib:.1f} GiB), "
          f"cache {args.cache}; set up in {setup_s:.1f} s", flush=True)

    mm = MemmapLoader(path, np.float32, (args.nodes, args.dim))
    mm.warm()  # warm: pages and page tables resident, for both loaders
    feats = deepwell.open(path, dtype="float32", shape=(-1, args.dim), cache_size=args.cache)
    loaders = {"deepwell": FeatureLoader(feats).load, "memmap": mm.gather}
    results = {"config": vars(args) | {"file_gib": file_gib, "edges": int(col.numel()),
                                       "direct_tier": feats.direct_tier, "setup_s": setup_s},
               "device": torch.cuda.get_device_name(), "epochs": {}}
    firsts = {}
    for name in args.loaders.split(","):
        torch.manual_seed(args.seed)  # the same model for every loader
        model = SAGE(args.dim, args.hidden, args.classes).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        results["epochs"][name] = []
        for e in range(args.epochs):
            t, first = run_epoch(loaders[name], sampler, model, opt, labels, train, args, e)
            results["epochs"][name].append(t)
            firsts.setdefault(name, first)
            print(f"{name:>8} epoch {e}: {t['epoch_s']:.2f} s = sampling {t['sampling_s']:.2f} + loading "
                  f"{t['loading_s']:.2f} ({t['rows_loaded'] * args.dim * 4 / t['loading_s'] / 1e9:.1f} GB/s) + "
                  f"training {t['training_s']:.2f}; loss {t['loss']:.3f}", flush=True)
    if "deepwell" in firsts and "memmap" in firsts:
        (ia, xa), (ib, xb) = firsts["deepwell"], firsts["memmap"]
        same = bool(torch.equal(ia, ib) and torch.equal(xa, xb))
        results["identical_features"] = same
        last = {k: v[-1] for k, v in results["epochs"].items()}
        results["epoch_loading_vs_memmap"] = last["memmap"]["loading_s"] / last["deepwell"]["loading_s"]
        results["epoch_vs_memmap"] = last["memmap"]["epoch_s"] / last["deepwell"]["epoch_s"]
        print(f"identical features on identical batches: {same}; feature loading x"
              f"{results['epoch_loading_vs_memmap']:.1f} faster than memmap, epoch x{results['epoch_vs_memmap']:.1f}")
    results["deepwell_stats"] = feats.stats()
    feats.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if results.get("identical_features", True) else 1


if __name__ == "__main__":
    sys.exit(main())
