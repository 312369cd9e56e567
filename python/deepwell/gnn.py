"""GNN feature loading over deepwell arrays: a loader that gathers several
mini-batches in one go (GIDS' storage-access accumulator: enough requests in
flight to keep the link or the disk busy), and a PyTorch Geometric
FeatureStore backed by deepwell arrays."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .array import Array


class FeatureLoader:
    """Features of node ids from an N x D deepwell array, as CUDA tensors.

    ``hot_rows``: node ids whose features are kept in a pinned host buffer (GIDS' constant CPU buffer),
    read by GPU warps in place (zero-copy, no storage access and no cache slot); the other ids go through
    the array. It pays off for data that is not in the page cache (O_DIRECT, files larger than memory)
    when a few rows (hubs) are read again and again and the GPU cache is small. The buffer is filled
    through the array when the loader is made."""

    def __init__(self, features: Array, hot_rows=None, fill_batch: int = 65536):
        if not features.on_gpu:
            raise ValueError("FeatureLoader needs an array on a GPU (device='cuda')")
        self.features = features
        self.hot = None
        self.hot_hits = 0
        self.loaded = 0
        if hot_rows is None:
            return
        dev = f"cuda:{features.device}"
        ids = torch.as_tensor(hot_rows).to(device=dev, dtype=torch.int64).unique()
        if ids.numel() == 0:
            return
        if int(ids[0]) < 0 or int(ids[-1]) >= features.rows:
            raise IndexError(f"hot rows must be in [0, {features.rows})")
        self.hot = Array(None, dtype=features.dtype.name, shape=(ids.numel(),) + features.row_shape,
                         device=features.device, cache_size="4MiB", cache_reads=False)
        for b in range(0, ids.numel(), fill_batch):
            part = ids[b:b + fill_batch]
            self.hot.scatter(torch.arange(b, b + part.numel(), device=dev), features.gather(part))
        self.hot.flush()  # the rows are in host memory now; reads go there in place
        self.slot = torch.full((features.rows,), -1, dtype=torch.int64, device=dev)
        self.slot[ids] = torch.arange(ids.numel(), device=dev)

    def load(self, ids: torch.Tensor, out: Optional[torch.Tensor] = None, check: bool = True) -> torch.Tensor:
        if self.hot is None:
            return self.features.gather(ids, out=out, check=check)
        ids = ids.to(torch.int64)
        if ids.numel():
            lo, hi = (int(x) for x in torch.aminmax(ids))  # one wait, not two
            if lo < 0 or hi >= self.features.rows:
                raise IndexError(f"node ids must be in [0, {self.features.rows})")
        s = self.slot[ids]
        hot = (s >= 0).nonzero().squeeze(1)
        cold = (s < 0).nonzero().squeeze(1)
        if out is None:
            out = torch.empty((ids.numel(),) + self.features.row_shape, dtype=self.features.dtype.torch(),
                              device=ids.device)
        if cold.numel():
            out[cold] = self.features.gather(ids[cold], check=check)
        if hot.numel():
            out[hot] = self.hot.gather(s[hot], check=check)
        self.hot_hits += int(hot.numel())
        self.loaded += int(ids.numel())
        return out

    def load_many(self, batches: Sequence[torch.Tensor], check: bool = True) -> list:
        """One gather for several batches' ids: returns one tensor per batch (views of one buffer)."""
        sizes = [int(b.numel()) for b in batches]
        rows = self.load(torch.cat([b.to(torch.int64) for b in batches]), check=check)
        return list(torch.split(rows, sizes))

    def close(self) -> None:
        if self.hot is not None:
            self.hot.close()
            self.hot = None


try:  # PyG is optional
    from torch_geometric.data import FeatureStore, TensorAttr
except ImportError:  # pragma: no cover - depends on the machine
    FeatureStore = None


if FeatureStore is not None:

    class DeepwellFeatureStore(FeatureStore):
        """A PyG FeatureStore whose tensors are deepwell arrays (node features on storage).

        ``store.add(array, group_name="paper", attr_name="x")`` registers an open array;
        ``store[group, "x", index]`` / ``store.get_tensor(...)`` gather rows on its GPU;
        ``put_tensor`` with an index scatters into a writable array."""

        def __init__(self):
            super().__init__()
            self._arrays = {}

        def add(self, array: Array, group_name=None, attr_name: str = "x") -> None:
            self._arrays[(group_name, attr_name)] = array

        def _array(self, attr: TensorAttr) -> Array:
            key = (attr.group_name, attr.attr_name)
            if key not in self._arrays:
                raise KeyError(f"no deepwell array for group {attr.group_name!r}, attribute {attr.attr_name!r}")
            return self._arrays[key]

        def _ids(self, a: Array, index):
            dev = f"cuda:{a.device}" if a.on_gpu else "cpu"
            if index is None:
                return torch.arange(a.rows, device=dev)
            if isinstance(index, slice):
                return torch.arange(*index.indices(a.rows), device=dev)
            if isinstance(index, int):
                return torch.tensor([index], device=dev)
            return torch.as_tensor(index, device=dev)

        def _get_tensor(self, attr: TensorAttr) -> Optional[torch.Tensor]:
            a = self._array(attr)
            return a.gather(self._ids(a, attr.index if attr.is_set("index") else None))

        def _put_tensor(self, tensor: torch.Tensor, attr: TensorAttr) -> bool:
            a = self._array(attr)
            a.scatter(self._ids(a, attr.index if attr.is_set("index") else None), tensor.contiguous())
            return True

        def _remove_tensor(self, attr: TensorAttr) -> bool:
            return self._arrays.pop((attr.group_name, attr.attr_name), None) is not None

        def _get_tensor_size(self, attr: TensorAttr):
            return self._array(attr).shape

        def get_all_tensor_attrs(self):
            return [TensorAttr(group_name=g, attr_name=n) for (g, n) in self._arrays]
