"""A persistent key-value store: 8-byte integer keys and fixed-size values in a
file (many times the GPU's memory), read and written in batches through
deepwell's page cache by GPU warps (or CPU threads). docs/kv.md.

    import deepwell.kv as kv
    store = kv.create("table.kv", value_bytes=32, capacity=10_000_000)   # on the GPU where there is one
    store.set(keys, values)          # keys: (n,) integers (NumPy or torch, CUDA or not);
                                     # values: n rows of 32 bytes (any dtype: (n, 8) float32, (n, 32) uint8...)
    values, found = store.get(keys)  # (n, 32) uint8 where the keys are (NumPy, or a CUDA tensor), a bool mask
    found = store.delete(keys)       # which keys were there
    store.close()
    store = kv.open("table.kv")      # after a crash too: the log is replayed

``set`` and ``delete`` return once their batch is durable: a power cut
afterwards loses nothing of it, and a cut during it leaves the store as it
was before the batch or after it, never in between. One call is one
atomic batch: a ``set`` or ``delete`` of more keys than ``store.max_batch``
(what one batch of this store's log holds: ``info()["max_batch"]``) is
refused, unless ``split=True`` asks for batches of ``max_batch`` keys, each
durable and atomic on its own, in order. A key repeated in a batch: the
last occurrence wins. Keys are 0 to 2**64 - 3.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Optional

import numpy as np

from . import _lib, _server
from ._lib import InvalidArgument, P, check, fields, i32, lib, options_fields, ptr, u32, u64
from .array import _count, _device_ordinal, _put, _set_cache, cuda_available, parse_bytes

__all__ = ["KVStore", "create", "open", "bytes_needed", "OK", "NOT_FOUND", "FULL", "BAD_KEY", "MAX_KEY"]

OK, NOT_FOUND, FULL, BAD_KEY = 0, 1, 2, 3
MAX_KEY = 2**64 - 3
_OPEN, _CREATE = 0, 1


class _Options(ctypes.Structure):
    _fields_ = options_fields((i32, "mode"), (u32, "value_bytes bucket_bytes max_probe"), (u64, "capacity"),
                              (u32, "log_rows"), (u64, "max_batch"))


_RESULT_FIELDS = ("ops", "inserted", "updated", "erased", "found", "not_found", "full", "bad_key", "superseded",
                  "log_rows")


class _Result(ctypes.Structure):
    _fields_ = fields((u64, " ".join(_RESULT_FIELDS)), (i32, "checkpointed"))


class _Info(ctypes.Structure):
    _fields_ = fields((u32, "key_bytes value_bytes bucket_bytes slots_per_bucket max_probe log_rows"),
                      (u64, "buckets slots file_bytes max_batch"), (i32, "device"),
                      (u64, "recovered_batches batches checkpoints"), (i32, "table_checksums header_copy_damaged"))


def _bind() -> None:
    R = ptr(_Result)
    _lib.bind(lib, {
        "dw_kv_options_init": ([ptr(_Options)], None),
        "dw_kv_bytes_needed": [u32, u64, u32, u32, ptr(u64)],
        "dw_kv_open": [ptr(_Options), ptr(P)],
        "dw_kv_close": [P],
        "dw_kv_info_get": [P, ptr(_Info)],
        # keys, values, count, on the device, statuses (one byte a key), counts
        "dw_kv_set": [P, P, P, u64, i32, P, R],
        "dw_kv_get": [P, P, P, u64, i32, P, R],
        "dw_kv_delete": [P, P, u64, i32, P, R],
        "dw_kv_checkpoint": [P],
    }, "the key-value store (src/capi/kv_api.cpp)")


_bind()

_open_stores = _lib.closed_at_exit("deepwell.kv")


def bytes_needed(value_bytes: int, capacity: int = 0, *, bucket_bytes: int = 0, log_rows: int = 0) -> int:
    """Bytes a store of this shape takes on disk (0: the defaults)."""
    out = ctypes.c_uint64()
    check(lib.dw_kv_bytes_needed(_count("value_bytes", value_bytes, 32), _count("capacity", capacity),
                                 _count("bucket_bytes", bucket_bytes, 32), _count("log_rows", log_rows, 32),
                                 ctypes.byref(out)))
    return out.value


def _torch():
    return sys.modules.get("torch")


class _Mem:
    """An array's pointer, byte count, and where it lives (a CUDA ordinal or None)."""

    def __init__(self, ptr: int, nbytes: int, cuda: Optional[int], holder: Any):
        self.ptr, self.nbytes, self.cuda, self.holder = ptr, nbytes, cuda, holder


def _keys(keys, refuse_above_max: bool = True) -> _Mem:
    torch = _torch()
    if torch is not None and isinstance(keys, torch.Tensor):
        t = keys.detach().reshape(-1)
        if t.dtype not in (torch.int64,) + ((torch.uint64,) if hasattr(torch, "uint64") else ()):
            if t.dtype.is_floating_point or t.dtype == torch.bool:
                raise InvalidArgument(f"keys must be integers, not {t.dtype}")
            t = t.to(torch.int64)
        if t.dtype == torch.int64 and t.numel() and bool((t < 0).any()):
            raise InvalidArgument("keys must not be negative (0 to 2**64 - 3)")
        t = t.contiguous()
        if t.is_cuda:
            return _Mem(t.data_ptr(), t.numel() * 8, t.device.index if t.device.index is not None
                        else torch.cuda.current_device(), t)
        keys = t.numpy()
    a = np.asarray(keys)
    if a.dtype.kind not in "iu":
        if a.size == 0:
            a = a.astype(np.uint64)
        else:
            raise InvalidArgument(f"keys must be integers, not {a.dtype}")
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        raise InvalidArgument("keys must not be negative (0 to 2**64 - 3)")
    a = np.ascontiguousarray(a.reshape(-1).astype(np.uint64, copy=False))
    if refuse_above_max and a.size and int(a.max()) > MAX_KEY:  # before the batch: none of it is done
        raise InvalidArgument(f"key {int(a.max())} is above 2**64 - 3 (deepwell.kv.MAX_KEY)")
    return _Mem(a.ctypes.data, a.nbytes, None, a)


def _values(values, n: int, value_bytes: int, like: _Mem) -> _Mem:
    torch = _torch()
    if torch is not None and isinstance(values, torch.Tensor):
        t = values.detach()
        if like.cuda is not None and not t.is_cuda:
            t = t.to(f"cuda:{like.cuda}")
        elif like.cuda is None and t.is_cuda:
            t = t.cpu()  # host keys: the batch goes through host memory
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        if nbytes != n * value_bytes:
            raise InvalidArgument(f"values hold {nbytes} bytes; {n} keys of {value_bytes}-byte values need "
                                  f"{n * value_bytes}")
        if t.is_cuda:
            return _Mem(t.data_ptr(), nbytes, t.device.index if t.device.index is not None
                        else torch.cuda.current_device(), t)
        values = t.numpy()
    a = np.ascontiguousarray(values)
    if a.nbytes != n * value_bytes:
        raise InvalidArgument(f"values hold {a.nbytes} bytes; {n} keys of {value_bytes}-byte values need "
                              f"{n * value_bytes}")
    if like.cuda is not None:  # device keys want device values
        if torch is None:
            raise InvalidArgument("CUDA keys with NumPy values: pass the values as a CUDA tensor too")
        t = torch.from_numpy(a.view(np.uint8).reshape(-1)).to(f"cuda:{like.cuda}")
        return _Mem(t.data_ptr(), a.nbytes, like.cuda, t)
    return _Mem(a.ctypes.data, a.nbytes, None, a)


class KVStore(_lib.Handle):
    """A key-value store in a file. Arguments: ``path``; ``create`` (a new
    store, created or truncated); ``value_bytes`` (create: 8 to 128, a
    multiple of 8; open: checked when given); ``capacity`` (create: keys the
    table is sized for, at 75% of its slots); ``device`` ("cuda", "cuda:N",
    an ordinal, or "cpu" for a host cache and CPU threads; default: the GPU
    where there is one); ``cache_size`` (bytes or "4GiB"); ``page_size``;
    ``bucket_bytes``, ``max_probe``, ``log_rows`` (create); ``max_batch``
    (keys a batch may hold, default 65536; the store's log may allow fewer:
    the ``max_batch`` attribute is what a batch holds); ``cpu_threads``,
    ``pollers``, ``odirect``, ``timeout`` (seconds per access)."""

    def __init__(self, path, *, create: bool = False, value_bytes: Optional[int] = None, capacity: int = 0,
                 device=None, cache_size=None, page_size: int = 0, bucket_bytes: int = 0, max_probe: int = 0,
                 log_rows: int = 0, max_batch: int = 0, cpu_threads: int = 0, pollers: int = 0,
                 odirect: bool = False, timeout: Optional[float] = None):
        self._h = None
        self.path = os.fsdecode(path)
        if create and not value_bytes:
            raise InvalidArgument("creating a store needs value_bytes (8 to 128, a multiple of 8)")
        if not create and _server.current() is None and not os.path.exists(self.path):
            raise FileNotFoundError(2, "No such file (deepwell.kv)", self.path)  # as deepwell.open
        o = _lib.sized(_Options, lib.dw_kv_options_init)
        self._path_bytes = self.path.encode()
        o.path = self._path_bytes
        o.mode = _CREATE if create else _OPEN
        _put(o, "value_bytes", "value_bytes", value_bytes or 0)
        _put(o, "capacity", "capacity", capacity)
        _put(o, "bucket_bytes", "bucket_bytes", bucket_bytes)
        _put(o, "max_probe", "max_probe", max_probe)
        _put(o, "log_rows", "log_rows", log_rows)
        _put(o, "max_batch", "max_batch", max_batch)
        _set_cache(o.cache, device=_device_ordinal(device), page_size=page_size, cache_size=cache_size, cpu_threads=cpu_threads,
                   pollers=pollers, odirect=odirect, timeout=timeout)
        h = ctypes.c_void_p()
        check(lib.dw_kv_open(ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        self.device = o.cache.device
        i = self.info()
        self.value_bytes = i["value_bytes"]
        self.max_batch = i["max_batch"]
        _open_stores.add(self)

    # ---- lifetime: close() (every batch is durable already), with, and a close when collected (_lib.Handle) ----
    _close_name = "dw_kv_close"

    def _what(self) -> str:
        return f"the store {self.path}"

    _repr_name = "deepwell.kv.KVStore"

    def _open_state(self) -> str:
        return f"{self.value_bytes}-byte values"

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0

    @_lib.holding
    def info(self) -> dict:
        """Shape (value_bytes, buckets, slots, ...), max_batch, and what open recovered."""
        i = _Info()
        check(lib.dw_kv_info_get(self._handle(), ctypes.byref(i)))
        return {name: getattr(i, name) for name, _ in _Info._fields_}

    # ---- batches ----
    def _where(self, m: _Mem) -> int:
        if m.cuda is None:
            return 0
        if self.device < 0:
            raise InvalidArgument(f"CUDA arrays given to a store on the CPU ({self.path}); open it with device='cuda'")
        if m.cuda != self.device:
            raise InvalidArgument(f"arrays on cuda:{m.cuda}, the store on cuda:{self.device}")
        return 1

    def _status(self, n: int, k: _Mem):
        if k.cuda is not None:
            return _torch().empty(n, dtype=_torch().uint8, device=f"cuda:{k.cuda}")
        return np.empty(n, np.uint8)

    @staticmethod
    def _ptr(a) -> int:
        return a.data_ptr() if hasattr(a, "data_ptr") else a.ctypes.data

    def _chunks(self, n: int, split: bool = True):
        if n > self.max_batch and not split:
            raise InvalidArgument(
                f"a batch of {n} keys; one atomic batch of this store holds at most {self.max_batch} "
                f"({self.path}: its log's rows bound it). Pass split=True for batches of {self.max_batch} keys, "
                f"each atomic on its own, or create the store with more log_rows")
        step = max(1, self.max_batch)
        for at in range(0, n, step):
            yield at, min(step, n - at)

    @staticmethod
    def _add(total: dict, r: _Result) -> None:
        for name in _RESULT_FIELDS:
            total[name] = total.get(name, 0) + getattr(r, name)
        total["checkpointed"] = total.get("checkpointed", 0) + r.checkpointed

    @_lib.holding
    def set(self, keys, values, *, return_status: bool = False, split: bool = False):
        """Stores values[i] under keys[i], as one atomic batch (``split``:
        more keys than ``max_batch`` as several, each atomic). Returns the
        counts (inserted, updated, full, bad_key, superseded, ...), and with
        return_status the per-key statuses too (OK, FULL, BAD_KEY)."""
        # Keys past MAX_KEY: refused before the batch, unless the caller takes
        # per-key statuses (then each is BAD_KEY and the others are stored).
        k = _keys(keys, refuse_above_max=not return_status)
        n = k.nbytes // 8
        v = _values(values, n, self.value_bytes, k)
        on_dev = self._where(k)
        st = self._status(n, k)
        total: dict = {}
        r = _Result()
        for at, c in self._chunks(n, split):
            check(lib.dw_kv_set(self._handle(), k.ptr + at * 8, v.ptr + at * self.value_bytes, c, on_dev,
                                self._ptr(st) + at, ctypes.byref(r)))
            self._add(total, r)
        return (total, st) if return_status else total

    @_lib.holding
    def get(self, keys, out=None):
        """The values of keys: (n, value_bytes) uint8 (NumPy, or a CUDA tensor
        for CUDA keys), zeros where a key is absent; and a bool mask of the
        keys found. ``out``: an array of n * value_bytes bytes to fill instead
        (any dtype, on the keys' device)."""
        k = _keys(keys)
        n = k.nbytes // 8
        on_dev = self._where(k)
        torch = _torch()
        if out is None:
            if k.cuda is not None:
                out = torch.empty((n, self.value_bytes), dtype=torch.uint8, device=f"cuda:{k.cuda}")
            else:
                out = np.empty((n, self.value_bytes), np.uint8)
        else:
            is_t = torch is not None and isinstance(out, torch.Tensor)
            nbytes = out.numel() * out.element_size() if is_t else out.nbytes
            contiguous = out.is_contiguous() if is_t else out.flags.c_contiguous
            if nbytes != n * self.value_bytes or not contiguous:
                raise InvalidArgument(f"out must be a contiguous array of {n * self.value_bytes} bytes")
            if not is_t and not out.flags.writeable:  # a view of bytes, say: filling it would change what is immutable
                raise InvalidArgument("out is read-only")
            if (k.cuda is not None) != (is_t and out.is_cuda):
                raise InvalidArgument("out must be on the keys' device")
        st = self._status(n, k)
        r = _Result()
        for at, c in self._chunks(n):
            check(lib.dw_kv_get(self._handle(), k.ptr + at * 8, self._ptr(out) + at * self.value_bytes, c, on_dev,
                                self._ptr(st) + at, ctypes.byref(r)))
        found = st == OK
        if bool((st == BAD_KEY).any()):
            raise InvalidArgument("keys above 2**64 - 3 (deepwell.kv.MAX_KEY)")
        return out, found

    @_lib.holding
    def delete(self, keys, *, split: bool = False):
        """Deletes keys, as one atomic batch (``split``: as for set); returns
        a bool mask of those that were there (a key repeated in a batch counts
        once, at its last occurrence)."""
        k = _keys(keys)
        n = k.nbytes // 8
        on_dev = self._where(k)
        st = self._status(n, k)
        r = _Result()
        for at, c in self._chunks(n, split):
            check(lib.dw_kv_delete(self._handle(), k.ptr + at * 8, c, on_dev, self._ptr(st) + at, ctypes.byref(r)))
        return st == OK

    @_lib.holding
    def checkpoint(self) -> None:
        """Writes the table's dirty pages back and truncates the log (batches
        are durable without it; it bounds the work of the next recovery)."""
        check(lib.dw_kv_checkpoint(self._handle()))

    @staticmethod
    def _one(key) -> np.ndarray:
        """One key as a batch of one: an int from 0 to MAX_KEY (1.9 was key 1, "1" key 1)."""
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise InvalidArgument(f"a key is an int from 0 to 2**64 - 3, not {key!r}")
        if not 0 <= int(key) <= MAX_KEY:
            raise InvalidArgument(f"key {int(key)} is not from 0 to 2**64 - 3 (deepwell.kv.MAX_KEY)")
        return np.array([int(key)], np.uint64)

    def __contains__(self, key) -> bool:
        _, found = self.get(self._one(key))
        return bool(found[0])

    def __getitem__(self, key) -> np.ndarray:
        v, found = self.get(self._one(key))
        if not found[0]:
            raise KeyError(key)
        return v[0]

    def __setitem__(self, key, value) -> None:
        self.set(self._one(key), np.asarray(value).reshape(1, -1))

    def __delitem__(self, key) -> None:
        if not self.delete(self._one(key))[0]:
            raise KeyError(key)


def create(path, value_bytes: int, capacity: int = 0, **kwargs) -> KVStore:
    """A new store in ``path`` (created, or truncated): ``value_bytes`` per value, sized for ``capacity`` keys."""
    return KVStore(path, create=True, value_bytes=value_bytes, capacity=capacity, **kwargs)


def open(path, **kwargs) -> KVStore:  # noqa: A001 (as deepwell.open)
    """An existing store (recovered: batches committed before a crash are replayed)."""
    return KVStore(path, **kwargs)
