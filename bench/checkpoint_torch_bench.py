"""checkpoint_vs_torch_save: a state dict of CUDA tensors (a model's weights and
Adam's two moments) saved durably by torch.save (+ flush and fsync) and by
deepwell.checkpoint.save, every tensor changed between saves. Prints one JSON
object. Goal: checkpoint_vs_torch_save >= 3.

    python3 bench/checkpoint_torch_bench.py --dir /var/tmp --mib 512

deepwell is timed as a call of deepwell.checkpoint.save (opening the file, a
controller and a GPU cache each time), and with a CheckpointStore kept open;
after two warm-up saves that allocate both of the file's slots (torch.save
writes over its file too).
"""
import argparse
import json
import os
import statistics
import time

import torch

import deepwell.checkpoint as ckpt


def state_dict(total_bytes: int, layers: int) -> dict:
    """Weights, biases and Adam moments: 3 x the parameters' bytes = total_bytes."""
    per_layer = total_bytes // 3 // layers // 4
    side = int(per_layer ** 0.5)
    g = torch.Generator(device="cuda").manual_seed(0)
    sd = {}
    for i in range(layers):
        w = torch.randn(side, side, device="cuda", generator=g)
        b = torch.randn(side, device="cuda", generator=g)
        sd[f"model.layer{i}.weight"] = w
        sd[f"model.layer{i}.bias"] = b
        for m in ("exp_avg", "exp_avg_sq"):
            sd[f"optim.state.{i}.weight.{m}"] = torch.randn_like(w)
            sd[f"optim.state.{i}.bias.{m}"] = torch.randn_like(b)
        sd[f"optim.state.{i}.step"] = torch.tensor(1.0)
    return sd


def bump(sd):
    for v in sd.values():
        v.add_(1)
    torch.cuda.synchronize()


def torch_save(sd, path) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--mib", type=int, default=512, help="bytes of the state dict")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--odirect", type=int, default=1)
    ap.add_argument("--commit", default="unknown")
    a = ap.parse_args()
    sd = state_dict(a.mib << 20, a.layers)
    nbytes = sum(v.numel() * v.element_size() for v in sd.values())
    tpath = os.path.join(a.dir, "deepwell-torch-bench.pt")
    dpath = os.path.join(a.dir, "deepwell-torch-bench.ckpt")
    for p in (tpath, dpath):
        if os.path.exists(p):
            os.unlink(p)
    cache = 2 * nbytes + (256 << 20)  # both slots stay in the GPU cache: saves write, never fetch
    kw = dict(cache_size=cache, odirect=bool(a.odirect))

    torch_save(sd, tpath)  # warm-up (allocates the file)
    ckpt.save(sd, dpath, **kw)
    bump(sd)
    ckpt.save(sd, dpath, **kw)
    t_torch, t_dw, t_open = [], [], []
    for _ in range(a.iters):
        bump(sd)
        t_torch.append(torch_save(sd, tpath))
        bump(sd)
        torch.cuda.synchronize()
        t = time.perf_counter()
        info = ckpt.save(sd, dpath, **kw)
        t_dw.append(time.perf_counter() - t)
    with ckpt.CheckpointStore(dpath, device=0, **kw) as s:
        s.save(sd)
        for _ in range(a.iters):
            bump(sd)
            t = time.perf_counter()
            s.save(sd)
            t_open.append(time.perf_counter() - t)
        s.save(sd)  # both slots hold the same bytes
        sd["model.layer0.weight"][0, 0] += 1
        inc = s.save(sd)
        t = time.perf_counter()
        back = s.load(device="cuda")
        t_load = time.perf_counter() - t
    ok = all(torch.equal(back[k].cpu(), v.cpu()) for k, v in sd.items())
    mt, md, mo = statistics.median(t_torch), statistics.median(t_dw), statistics.median(t_open)
    out = {
        "bench": "checkpoint_torch",
        "commit": a.commit,
        "bytes": nbytes,
        "tensors": len(sd),
        "odirect": bool(a.odirect),
        "torch_save_fsync_s": t_torch,
        "deepwell_save_s": t_dw,
        "deepwell_save_kept_open_s": t_open,
        "torch_save_GBps": nbytes / mt / 1e9,
        "deepwell_save_GBps": nbytes / md / 1e9,
        "deepwell_save_kept_open_GBps": nbytes / mo / 1e9,
        "checkpoint_vs_torch_save": mt / md,
        "checkpoint_vs_torch_save_kept_open": mt / mo,
        "goal_checkpoint_vs_torch_save": 3.0,
        "last_save": {k: info[k] for k in ("generation", "bytes_written", "units_written", "units_total")},
        "incremental_one_element": {k: inc[k] for k in ("bytes_written", "units_written", "units_total", "seconds")},
        "load_GBps": nbytes / t_load / 1e9,
        "load_equal": ok,
    }
    print(json.dumps(out))
    for p in (tpath, dpath):
        os.unlink(p)


if __name__ == "__main__":
    main()
