#!/usr/bin/env python3
"""A training loop that survives being killed: the model and optimizer are
checkpointed with deepwell.checkpoint every few steps, and the step's
per-sample losses go into a deepwell.kv store, one durable batch per step.
Run it, kill it (kill -9 included) at any moment, run it again: it resumes
from the last checkpoint, and the store holds every step whose write
returned.

    python3 examples/durable_training.py --dir /var/tmp/run --steps 200
    python3 examples/durable_training.py --dir /var/tmp/run --steps 400   # resumes

Needs PyTorch; uses the GPU where there is one.
"""
import argparse
import os

import numpy as np
import torch

import deepwell.checkpoint as ckpt
import deepwell.kv as kv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/var/tmp/deepwell-training")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=20, help="checkpoint every this many steps")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad()
    model(torch.zeros(1, 64, device=dev)).sum().backward()
    opt.step()  # creates the optimizer's state tensors, so that the checkpoint's shape is fixed from the start

    path = os.path.join(a.dir, "model.ckpt")
    start = 0
    if os.path.exists(path):
        state = {"model." + k: v for k, v in model.state_dict().items()}
        state.update(ckpt.flatten(opt.state_dict()["state"], prefix="opt"))
        state["step"] = torch.zeros(1, dtype=torch.int64, device=dev)
        ckpt.load(path, into=state)  # in place, every page checked
        start = int(state["step"].item())
        print(f"resumed from step {start} (checkpoint generation {ckpt.generation(path)})")

    losses_path = os.path.join(a.dir, "losses.kv")
    device = "cuda" if dev == "cuda" else "cpu"
    store = (kv.open(losses_path, device=device) if os.path.exists(losses_path)
             else kv.create(losses_path, value_bytes=8, capacity=1 << 20, device=device))  # room for 16K steps

    w_true = torch.randn(64, 1, generator=torch.Generator().manual_seed(1)).to(dev)
    for step in range(start, a.steps):
        g = torch.Generator(device=dev).manual_seed(step)
        x = torch.randn(64, 64, device=dev, generator=g)
        loss = (model(x) - x @ w_true).pow(2).squeeze(1)
        opt.zero_grad()
        loss.mean().backward()
        opt.step()
        # Key: step * 64 + sample; value: the loss as 8 bytes. Durable when set() returns.
        keys = torch.arange(step * 64, step * 64 + 64, device=dev, dtype=torch.int64)
        counts = store.set(keys, loss.detach().double().reshape(64, 1))
        if counts.get("full"):
            raise SystemExit(f"{losses_path} is full: create it with a larger capacity")
        if (step + 1) % a.every == 0 or step + 1 == a.steps:
            state = {"model." + k: v for k, v in model.state_dict().items()}
            state.update(ckpt.flatten(opt.state_dict()["state"], prefix="opt"))
            state["step"] = torch.tensor([step + 1], dtype=torch.int64, device=dev)
            info = ckpt.save(state, path)
            print(f"step {step + 1}: loss {loss.mean().item():.4f}, checkpoint generation {info['generation']} "
                  f"({info['bytes_written']} bytes written)")

    vals, found = store.get(np.arange(a.steps * 64, dtype=np.uint64))
    print(f"losses stored for {int(np.asarray(found).sum()) // 64} of {a.steps} steps")
    store.close()


if __name__ == "__main__":
    main()
