"""GNN feature loading over deepwell arrays: a loader that gathers several
mini-batches in one go (GIDS' storage-access accumulator: enough requests in
flight to keep the link or the disk busy), and a PyTorch Geometric
FeatureStore backed by deepwell arrays."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .array import Array


class FeatureLoader:
    """Features of node ids from an N x D deepwell array, as CUDA tensors."""

    def __init__(self, features: Array):
        if not features.on_gpu:
            raise ValueError("FeatureLoader needs an array on a GPU (device='cuda')")
        self.features = features

    def load(self, ids: torch.Tensor, out: Optional[torch.Tensor] = None, check: bool = True) -> torch.Tensor:
        return self.features.gather(ids, out=out, check=check)

    def load_many(self, batches: Sequence[torch.Tensor], check: bool = True) -> list:
        """One gather for several batches' ids: returns one tensor per batch (views of one buffer)."""
        sizes = [int(b.numel()) for b in batches]
        rows = self.features.gather(torch.cat([b.to(torch.int64) for b in batches]), check=check)
        return list(torch.split(rows, sizes))


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
