"""Vector search over vectors on storage (docs/vectors.md): an index file whose
graph records (each vector and its neighbours) are read through deepwell's page
cache as a search visits them, with product-quantised codes in memory to steer
it, searched by GPU warps (or CPU threads).

    import deepwell.vectors as dv
    dv.build(base, "base.dwv")                   # base: (n, dim) float32 / float16 / uint8 (NumPy or torch)
    index = dv.open("base.dwv", cache_size="1GiB")   # on the GPU where there is one
    ids, distances = index.search(queries, k=10)     # queries: (nq, dim); torch tensors on the index's
                                                     # GPU when the queries are CUDA tensors, else NumPy
    index.close()

Distances are squared L2, or the negated inner product (``metric="ip"``):
smaller is nearer. ``ids`` is -1 where fewer than k were found (int64).
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

import numpy as np

from . import _lib, _server
from ._lib import InvalidArgument, P, check, fields, i32, lib, options_fields, ptr, u32, u64, f64
from .array import _count, _device_ordinal, _put, _set_cache

__all__ = ["VectorIndex", "build", "open", "TYPES", "METRICS"]

TYPES = {"float32": 0, "float16": 1, "uint8": 2}
METRICS = {"l2": 0, "ip": 1}
_NONE = 2**32 - 1


class _BuildOptions(ctypes.Structure):
    _fields_ = fields((u32, "size degree list passes pq_subspaces page_bytes threads"), (ctypes.c_float, "alpha"),
                      (u64, "shard_vectors"))


class _BuildInfo(ctypes.Structure):
    _fields_ = fields((u64, "vectors edges"), (u32, "pq_subspaces"),
                      (f64, "quantiser_seconds graph_seconds write_seconds"))


class _Options(ctypes.Structure):
    _fields_ = options_fields()


class _Info(ctypes.Structure):
    _fields_ = fields((u64, "count"), (u32, "dim"), (i32, "type metric"), (u32, "degree page_bytes pq_subspaces"),
                      (i32, "device"), (u64, "records_bytes cache_bytes"))


class _SearchOptions(ctypes.Structure):
    _fields_ = fields((u32, "size k list width max_expansions"), (i32, "pages"), (u32, "entry_sample"))


class _Counts(ctypes.Structure):
    _fields_ = fields((u64, "expansions distances bad_ids fetches page_mates"))


class _Result(ctypes.Structure):
    """dw_vectors_search's counts, mirrored for the ABI check: the package calls dw_vectors_search_with."""
    _fields_ = fields((u64, "expansions distances bad_ids"))


# How a search uses each page it fetches (DW_PAGES_*).
PAGES = {"nearer": 0, "all": 1, "picked": 2}


def _u32(name: str, v) -> int:
    """A count for a uint32_t field: refused here, named, rather than wrapped by ctypes."""
    n = _count(name, v)
    if n > 0xFFFFFFFF:
        raise InvalidArgument(f"{name} {v} does not fit 32 bits")
    return n


def _bind() -> None:
    _lib.bind(lib, {
        "dw_vectors_build_options_init": ([ptr(_BuildOptions)], None),
        "dw_vectors_build": [P, u64, u32, i32, i32, ctypes.c_char_p, ptr(_BuildOptions), ptr(_BuildInfo)],
        "dw_vectors_options_init": ([ptr(_Options)], None),
        "dw_vectors_open": [ptr(_Options), ptr(P)],
        "dw_vectors_close": [P],
        "dw_vectors_info_get": [P, ptr(_Info)],
        "dw_vectors_search_options_init": ([ptr(_SearchOptions)], None),
        # queries, nq, options, on the device, ids, distances, counts
        "dw_vectors_search_with": [P, P, u64, ptr(_SearchOptions), i32, P, P, ptr(_Counts)],
    }, "vector search (src/capi/vectors_api.cpp)")


_bind()
_open_indexes = _lib.closed_at_exit("deepwell.vectors")


def _torch():
    return sys.modules.get("torch")


def _host_rows(data, what: str) -> np.ndarray:
    """A (n, dim) C-contiguous NumPy array of a supported type."""
    torch = _torch()
    if torch is not None and isinstance(data, torch.Tensor):
        data = data.detach().cpu().numpy()
    a = np.asarray(data)
    if a.ndim != 2:
        raise InvalidArgument(f"{what} must be 2-D (n, dim), not of shape {a.shape}")
    if a.dtype.name not in TYPES:
        raise InvalidArgument(f"{what} must be float32, float16 or uint8, not {a.dtype}")
    return np.ascontiguousarray(a)


def build(data, path, *, metric: str = "l2", degree: int = 0, list_size: int = 0, alpha: float = 0.0,
          passes: Optional[int] = None, pq_subspaces: int = 0, page_bytes: int = 0, threads: int = 0,
          shard_vectors: int = 0) -> dict:
    """Builds the index of ``data`` ((n, dim) float32, float16 or uint8; NumPy or torch) into ``path``
    on CPU threads. ``metric``: "l2" or "ip". ``degree`` (neighbours a node, default 32), ``list_size``
    (the build's search list, default 64), ``alpha`` (default 1.2), ``passes`` (Vamana passes, default 2),
    ``pq_subspaces`` (default dim / 4, dim / 2 for "ip", where it divides; at most 64), ``shard_vectors``
    (out of core: the graph built in overlapping shards of at most this many vectors, merged; 0: at
    once). Returns the build's report."""
    if metric not in METRICS:
        raise InvalidArgument(f"metric must be one of {sorted(METRICS)}, not {metric!r}")
    a = _host_rows(data, "the vectors")
    o = _lib.sized(_BuildOptions, lib.dw_vectors_build_options_init)
    _put(o, "degree", "degree", degree)
    _put(o, "list", "list_size", list_size)
    if passes is not None:
        _put(o, "passes", "passes", passes)
    _put(o, "pq_subspaces", "pq_subspaces", pq_subspaces)
    _put(o, "page_bytes", "page_bytes", page_bytes)
    _put(o, "threads", "threads", threads)
    o.alpha = float(alpha)
    _put(o, "shard_vectors", "shard_vectors", shard_vectors)
    info = _BuildInfo()
    check(lib.dw_vectors_build(a.ctypes.data, a.shape[0], a.shape[1], TYPES[a.dtype.name], METRICS[metric],
                               os.fspath(path).encode(), ctypes.byref(o), ctypes.byref(info)))
    return {name: getattr(info, name) for name, _ in _BuildInfo._fields_}


class VectorIndex(_lib.Handle):
    """An index file opened for search. ``device``: "cuda", "cuda:N", an ordinal, or "cpu" (a host
    cache and CPU threads; default: the GPU where there is one); ``cache_size`` (bytes or "1GiB"):
    the page cache the records are read through; ``page_size``, ``cpu_threads``, ``pollers``,
    ``odirect``, ``timeout`` as for every deepwell handle."""

    _close_name = "dw_vectors_close"

    def __init__(self, path, *, device=None, cache_size=None, page_size: int = 0, cpu_threads: int = 0,
                 pollers: int = 0, odirect: bool = False, timeout: Optional[float] = None):
        self._h = None
        self.path = os.fsdecode(path)
        if _server.current() is None and not os.path.exists(self.path):
            raise FileNotFoundError(2, "No such file (deepwell.vectors)", self.path)  # as deepwell.open
        o = _lib.sized(_Options, lib.dw_vectors_options_init)
        self._path_bytes = self.path.encode()
        o.path = self._path_bytes
        # page_size 0 (the init's): the index's page.
        _set_cache(o.cache, device=_device_ordinal(device), page_size=page_size or None, cache_size=cache_size,
                   cpu_threads=cpu_threads, pollers=pollers, odirect=odirect, timeout=timeout)
        h = ctypes.c_void_p()
        check(lib.dw_vectors_open(ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        i = self.info()
        self.device, self.dim, self.count = i["device"], i["dim"], i["count"]
        _open_indexes.add(self)

    def _what(self) -> str:
        return f"the vector index {self.path}"

    _repr_name = "deepwell.vectors.VectorIndex"

    def _open_state(self) -> str:
        return f"{self.count} x {self.dim}"

    def __len__(self) -> int:
        return self.count

    @_lib.holding
    def info(self) -> dict:
        """count, dim, type, metric, degree, page_bytes, pq_subspaces, device, records_bytes, cache_bytes."""
        i = _Info()
        check(lib.dw_vectors_info_get(self._handle(), ctypes.byref(i)))
        d = {name: getattr(i, name) for name, _ in _Info._fields_}
        d["type"] = {v: k for k, v in TYPES.items()}[d["type"]]
        d["metric"] = {v: k for k, v in METRICS.items()}[d["metric"]]
        return d

    @_lib.holding
    def search(self, queries, k: int = 10, *, list_size: int = 64, width: int = 4, pages: str = "nearer",
               max_expansions: int = 0, entry_sample: int = 1024, return_counts: bool = False):
        """The ``k`` nearest of each query ((nq, dim), any float or uint8 type; NumPy or torch): ``(ids,
        distances)``, each (nq, k), nearest first; ids int64 (-1 where fewer were found), distances
        float32. CUDA tensors on the index's GPU give CUDA tensors (searched in place); anything else
        gives NumPy arrays. ``list_size``: candidates kept (>= k; more: higher recall, slower);
        ``width``: pages fetched a step (the beam). ``pages``: how each fetched page is used, "nearer"
        (every record gets its exact distance, those nearer the query than the picked one join the
        candidates), "all" (all of them join) or "picked" (only the picked record, as DiskANN).
        ``max_expansions``: nodes a query expands at most (0: 4 x list_size, 2 x with "picked").
        ``entry_sample``: where each query starts: 0, the index's entry node; N, the nearest (by code) of
        it and N nodes spread over the index (at most 65536; every node where N is the index's size or more).
        ``return_counts`` adds the search's counts as a third item (nodes expanded, pages fetched, page
        mates expanded without a fetch, quantised distances, bad neighbour ids)."""
        h = self._handle()
        if pages not in PAGES:
            raise InvalidArgument(f"pages must be one of {', '.join(PAGES)}, not {pages!r}")
        o = _SearchOptions()
        lib.dw_vectors_search_options_init(ctypes.byref(o))
        o.k, o.list, o.width = _u32("k", k), _u32("list_size", list_size), _u32("width", width)
        o.max_expansions, o.pages = _u32("max_expansions", max_expansions), PAGES[pages]
        o.entry_sample = _u32("entry_sample", entry_sample)
        k = o.k
        # Before the results are allocated (k = 2**31 asked Python for 7.8 TiB).
        if k > self.count:
            raise InvalidArgument(f"vector search: k = {k} is larger than the index's {self.count} vectors")
        if not k <= o.list <= 1024:
            raise InvalidArgument(f"vector search: the list ({o.list}) must be >= k ({k}) and at most 1024")
        torch = _torch()
        on_device = torch is not None and isinstance(queries, torch.Tensor) and queries.is_cuda
        if on_device:
            q = queries.detach()
            if q.dim() != 2 or q.shape[1] != self.dim:
                raise InvalidArgument(f"queries of shape {tuple(q.shape)} for an index of dimension {self.dim}")
            if self.device < 0:
                raise InvalidArgument("CUDA queries given to an index on the CPU; open it with device='cuda'")
            if q.device.index != self.device:
                raise InvalidArgument(f"queries on {q.device}, the index on cuda:{self.device}")
            q = q.to(torch.float32).contiguous()
            nq = q.shape[0]
            ids = torch.empty((nq, k), dtype=torch.int32, device=q.device)
            dist = torch.empty((nq, k), dtype=torch.float32, device=q.device)
            r = _Counts()
            check(lib.dw_vectors_search_with(h, q.data_ptr(), nq, ctypes.byref(o), 1, ids.data_ptr(),
                                             dist.data_ptr(), ctypes.byref(r)))
            result = (ids.to(torch.int64), dist)  # UINT32_MAX (none) read as int32 is -1
        else:
            if torch is not None and isinstance(queries, torch.Tensor):
                queries = queries.detach().cpu().numpy()
            q = np.asarray(queries)
            if q.ndim != 2 or q.shape[1] != self.dim:
                raise InvalidArgument(f"queries of shape {q.shape} for an index of dimension {self.dim}")
            if q.dtype.kind not in "fiu":
                raise InvalidArgument(f"queries must be numbers, not {q.dtype}")
            q = np.ascontiguousarray(q, dtype=np.float32)
            nq = q.shape[0]
            ids = np.empty((nq, k), np.uint32)
            dist = np.empty((nq, k), np.float32)
            r = _Counts()
            check(lib.dw_vectors_search_with(h, q.ctypes.data, nq, ctypes.byref(o), 0, ids.ctypes.data,
                                             dist.ctypes.data, ctypes.byref(r)))
            out = ids.astype(np.int64)
            out[ids == _NONE] = -1
            result = (out, dist)
        if return_counts:
            return result + ({name: getattr(r, name) for name, _ in _Counts._fields_},)
        return result


def open(path, **kw) -> VectorIndex:  # noqa: A001 (the module's verb, as kv.open)
    """``VectorIndex(path, **kw)``."""
    return VectorIndex(path, **kw)
