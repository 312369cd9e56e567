"""Neighbour sampling on the GPU with PyTorch alone (PyG's NeighborLoader
needs pyg-lib or torch-sparse, which many machines lack). Produces what
PyG's loaders produce: the sampled nodes (seeds first) and the edges between
them in local ids, messages flowing from neighbour to target."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SampledSubgraph:
    n_id: torch.Tensor          # global ids of the sampled nodes; the first batch_size are the seeds
    edge_index: torch.Tensor    # 2 x E local ids: row 0 the neighbour (source), row 1 the target
    batch_size: int
    nodes_per_hop: list         # new nodes added by each hop (seeds first)


class NeighborSampler:
    """Samples up to ``fanouts[h]`` neighbours per node at hop h from a CSR graph (``rowptr``, ``col``
    on the GPU): all of them when a node has that many or fewer, else ``fanouts[h]`` drawn uniformly
    (with replacement, as in GraphSAGE). Deterministic for a given ``generator`` state."""

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, fanouts, generator: torch.Generator | None = None):
        if rowptr.device != col.device:
            raise ValueError("rowptr and col must be on the same device")
        if rowptr.dim() != 1 or col.dim() != 1 or rowptr.numel() < 1:
            raise ValueError("rowptr and col must be one-dimensional (CSR)")
        if any(int(f) <= 0 for f in fanouts):
            raise ValueError(f"fanouts must be positive, not {list(fanouts)}")
        self.rowptr = rowptr.to(torch.int64)
        self.col = col.to(torch.int64)
        self.fanouts = [int(f) for f in fanouts]
        self.generator = generator
        self.nodes = rowptr.numel() - 1

    def sample(self, seeds: torch.Tensor) -> SampledSubgraph:
        dev = self.rowptr.device
        n_id = seeds.to(device=dev, dtype=torch.int64)
        if n_id.numel() and (int(n_id.min()) < 0 or int(n_id.max()) >= self.nodes):
            raise IndexError(f"seed ids must be in [0, {self.nodes})")
        frontier = torch.arange(n_id.numel(), device=dev)
        srcs, dsts, per_hop = [], [], [n_id.numel()]
        for k in self.fanouts:
            nodes = n_id[frontier]
            start = self.rowptr[nodes]
            deg = self.rowptr[nodes + 1] - start
            take = deg.clamp(max=k)
            owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=dev), take)
            first = torch.cumsum(take, 0) - take
            pos = torch.arange(owner.numel(), device=dev) - first[owner]
            sampled = deg[owner] > k
            rnd = torch.rand(owner.numel(), device=dev, generator=self.generator)
            pos = torch.where(sampled, (rnd * deg[owner]).long().clamp(max=deg[owner] - 1), pos)
            nbr = self.col[start[owner] + pos]
            # Relabel: nodes already sampled keep their local id, new ones are appended in order of first use.
            cat = torch.cat([n_id, nbr])
            uniq, inv = torch.unique(cat, return_inverse=True)
            first_pos = torch.full((uniq.numel(),), cat.numel(), device=dev, dtype=torch.int64)
            first_pos.scatter_reduce_(0, inv, torch.arange(cat.numel(), device=dev), reduce="amin")
            new = (first_pos >= n_id.numel()).nonzero().squeeze(1)
            new = new[first_pos[new].argsort()]
            local = torch.empty(uniq.numel(), device=dev, dtype=torch.int64)
            local[inv[:n_id.numel()]] = torch.arange(n_id.numel(), device=dev)
            local[new] = n_id.numel() + torch.arange(new.numel(), device=dev)
            srcs.append(local[inv[n_id.numel():]])
            dsts.append(frontier[owner])
            frontier = n_id.numel() + torch.arange(new.numel(), device=dev)
            n_id = torch.cat([n_id, uniq[new]])
            per_hop.append(new.numel())
        edge_index = torch.stack([torch.cat(srcs), torch.cat(dsts)]) if srcs else torch.empty(2, 0, device=dev)
        return SampledSubgraph(n_id, edge_index, int(seeds.numel()), per_hop)
