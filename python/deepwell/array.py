"""deepwell.Array: a file (or host memory) of fixed-size rows, read and
written by index arrays through a deepwell page cache on a GPU, or on the
host for CPU clients."""
from __future__ import annotations

import ctypes
import math
import os
import sys
from typing import Any, Optional

import numpy as np

from . import _interop, _lib, _server
from ._lib import IndexOutOfRange, InvalidArgument, check, lib

_DIRECT = {"never": 0, "resident": 1, "always": 2}
def parse_bytes(v) -> int:
    """256 << 20, "256MiB", "1.5 GiB", "4k": sizes in bytes (units are powers of 1024), read by
    the C library's one rule for sizes (dw_parse_size), the rule of the command line, the
    environment and the server's configuration."""
    if isinstance(v, (int, np.integer)):
        n = int(v)
        if n < 0:
            raise InvalidArgument(f"a size cannot be negative: {v!r}")
        if n >= 1 << 64:  # the C structure's field would wrap
            raise InvalidArgument(f"a size of {v!r} is more than 2^64 bytes")
        return n
    if str(v).strip().startswith("-"):
        raise InvalidArgument(f"a size cannot be negative: {v!r}")
    out = ctypes.c_uint64()
    _lib.check(_lib.lib.dw_parse_size(str(v).encode(), ctypes.byref(out)))
    return out.value


def _seconds(name: str, v) -> float:
    """A time limit: a finite number of seconds, 0 or more."""
    x = float(v)
    if not math.isfinite(x) or x < 0:
        raise InvalidArgument(f"{name} must be a finite number of seconds, 0 or more, not {v!r}")
    return x


def _count(name: str, v, bits: int = 64) -> int:
    """An integer setting that is a count or a byte offset: negative values, and
    values past the C field's ``bits``, are refused here, before ctypes wraps them."""
    n = int(v)
    if n < 0:
        raise InvalidArgument(f"{name} cannot be negative: {v!r}")
    if n >> bits:
        raise InvalidArgument(f"{name} {v!r} is too large (at most 2^{bits} - 1)")
    return n


def _put(struct, field: str, name: str, v) -> int:
    """``struct.field = _count(name, v)``, within the field's own width."""
    ctype = dict(type(struct)._fields_)[field]
    n = _count(name, v, 8 * ctypes.sizeof(ctype))
    setattr(struct, field, n)
    return n


class _DType:
    """An element type by name: every NumPy type, and bfloat16 (which NumPy lacks)."""

    def __init__(self, dtype):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(dtype, torch.dtype):
            name = str(dtype).replace("torch.", "")
        elif isinstance(dtype, str) and dtype == "bfloat16":
            name = "bfloat16"
        else:
            try:
                dt = np.dtype(dtype)
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"unknown dtype {dtype!r}") from e
            if dt.hasobject:  # pointers to Python objects, not data a file can hold
                raise InvalidArgument(f"dtype {dt} holds Python objects: an array holds plain data")
            # Rows are read as this machine's numbers of one type: a big-endian file's bytes would be
            # read as the wrong numbers (>f4 3.0 came back as 2.3e-41), a record or string type as
            # something else.
            if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
                raise InvalidArgument(f"dtype {dt}: rows are of one number type (bool, int, uint, float or "
                                      "complex); read records or strings as bytes (uint8) and view them")
            if not dt.isnative and dt.itemsize > 1:
                raise InvalidArgument(f"dtype {dt} is big-endian: rows are read in this machine's byte order "
                                      f"({dt.newbyteorder('=')}); read them so and byteswap()")
            name = dt.name
        self.name = name
        self.itemsize = 2 if name == "bfloat16" else np.dtype(name).itemsize

    def kind(self) -> str:
        """NumPy's kind letter, as _interop.View gives it ('V' for bfloat16)."""
        return "V" if self.name == "bfloat16" else np.dtype(self.name).kind

    def numpy(self) -> np.dtype:
        if self.name == "bfloat16":
            raise InvalidArgument("NumPy has no bfloat16: read bfloat16 arrays into torch tensors")
        return np.dtype(self.name)

    def torch(self):
        import torch
        return getattr(torch, self.name)

    def __repr__(self) -> str:
        return self.name


# Arrays still open when Python exits are closed then, before the CUDA runtime's exit handlers.
_open_arrays = _lib.closed_at_exit("deepwell")


def _layout(path, stripe, mirror, chunk):
    """("stripe" | "mirror" | None, [member paths]) of Array's arguments; the library checks the
    rest (members alike in size, the chunk a power of two) and names what is wrong."""
    if stripe is not None and mirror is not None:
        raise InvalidArgument("stripe and mirror both given: a dataset is one or the other")
    layout = "stripe" if stripe is not None else "mirror" if mirror is not None else None
    if layout is None:
        if chunk is not None:
            raise InvalidArgument("chunk applies to a stripe only")
        return None, []
    if path is not None:
        raise InvalidArgument(f"path and {layout} both given: a {layout}'s files are its members")
    given = stripe if stripe is not None else mirror
    if isinstance(given, (str, bytes, os.PathLike)):
        raise InvalidArgument(f"{layout} takes a list of paths, not one path: {given!r}")
    members = [os.fspath(m) for m in given]
    if not members:
        raise InvalidArgument(f"a {layout} with no members")
    if chunk is not None and layout == "mirror":
        raise InvalidArgument("chunk applies to a stripe only, not a mirror")
    return layout, members


def cuda_available() -> bool:
    """True when a CUDA driver and at least one device are usable."""
    n = ctypes.c_int32()
    return lib.dw_cuda_device_count(ctypes.byref(n)) == 0 and n.value > 0


def _device_ordinal(device) -> int:
    if device is None:
        return 0 if cuda_available() else -1
    if isinstance(device, int):
        return device
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(device, torch.device):
        device = str(device)
    d = str(device)
    if d == "cpu":
        return -1
    if d == "cuda":
        return 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return int(d[5:])
    raise InvalidArgument(f"device must be 'cpu', 'cuda', 'cuda:N' or an ordinal, not {device!r}")


def _set_cache(c, *, device: int, page_size=None, cache_size=None, queue_pairs=None, queue_entries=None,
               pollers=None, cpu_threads=None, odirect=False, direct=None, timeout=None) -> None:
    """Fills a dw_cache_options (_lib.CacheOptions) for every entry point alike: each setting given
    replaces the default its dw_*_options_init put there; None keeps it (DEEPWELL_* in the
    environment, else built in; docs/settings.md)."""
    c.device = device
    if page_size is not None:
        _put(c, "page_size", "page_size", page_size)
    if cache_size is not None:
        c.cache_bytes = parse_bytes(cache_size)
    if queue_pairs is not None:
        _put(c, "queue_pairs", "queue_pairs", queue_pairs)
    if queue_entries is not None:
        _put(c, "queue_entries", "queue_entries", queue_entries)
    if pollers is not None:
        _put(c, "pollers", "pollers", pollers)
    if cpu_threads is not None:
        _put(c, "cpu_threads", "cpu_threads", cpu_threads)
    c.odirect = int(bool(odirect))
    if direct is not None:
        if direct not in _DIRECT:
            raise InvalidArgument(f"direct must be one of {sorted(_DIRECT)}, not {direct!r}")
        c.direct_files = _DIRECT[direct]
    if timeout is not None:
        c.timeout_s = _seconds("timeout", timeout)



def _native_indices(idx: np.ndarray) -> np.ndarray:
    """NumPy indices as the library reads them: int32 or int64 in this machine's byte order. Any integer
    type numpy indexes with is taken (uint8 to int64); big-endian ones are swapped, not read as the bytes
    they are (2**56 big-endian was row 1); uint64 past int64 is out of range by its own value."""
    if idx.dtype.kind == "u" and idx.dtype.itemsize == 8 and idx.size and int(idx.max()) > np.iinfo(np.int64).max:
        raise IndexOutOfRange(f"index {int(idx.max())} is out of range (past int64)")
    if idx.dtype.kind == "u" or idx.dtype.itemsize < 4:
        return idx.astype(np.int64)
    if not idx.dtype.isnative:
        return idx.astype(idx.dtype.newbyteorder("="))
    return idx

class Array(_lib.CallGuard):
    """A dataset of ``shape[0]`` rows of ``shape[1:]`` elements of ``dtype``.

    Arguments: ``path`` (a file or block device; None with ``shape`` and
    ``device`` gives zeroed host memory), ``dtype``, ``shape`` (rows first;
    None: rows of one element, as many as the file holds; ``(-1, D)``: D
    per row, rows from the file's size), ``offset`` (bytes before the data),
    ``page_size``, ``cache_size`` (bytes or "1GiB"; these and ``direct``,
    ``pollers``, ``timeout`` default to the library's settings: DEEPWELL_*
    in the environment, else the built-in values, docs/settings.md), ``device`` ("cuda",
    "cuda:N", "cpu"; default: the first GPU, else the CPU), ``writable``,
    ``create`` (make the file, ``shape`` rows long, if missing; one
    that is there is opened, never grown),
    ``odirect`` (bypass the page cache), ``direct`` ("resident": GPU warps
    read a file that is fully in the page cache straight from it;
    "never"; "always": pins the whole file), ``pollers`` (controller
    threads), ``cpu_threads`` (a CPU client's gather threads), ``timeout``
    (seconds per access), ``cache_reads`` (False: where there is a direct
    tier, gathers read rows in place without caching them, for rows read
    once; a writable array in host memory then scatters in place too, and a
    writable file reads through the cache, which holds its scattered rows).

    An array of drives instead of ``path``: ``stripe=[paths]`` (``chunk``
    bytes of the dataset to each file in turn; default 64 KiB) or
    ``mirror=[paths]`` (every file holds it all: reads spread over them,
    writes go to each, a failing one is skipped and named in ``route``).
    The files must be alike in size; ``create`` makes the missing ones.
    """

    def __init__(self, path: Optional[str | os.PathLike] = None, *, dtype="float32", shape=None, offset: int = 0,
                 page_size: Optional[int] = None, cache_size=None, device=None, writable: bool = False,
                 create: bool = False, odirect: bool = False, direct: Optional[str] = None,
                 pollers: Optional[int] = None, cpu_threads: int = 0, timeout: Optional[float] = None,
                 queue_pairs: int = 0, cache_reads: bool = True, stripe=None, mirror=None, chunk=None):
        self._h = None
        self.dtype = _DType(dtype)
        shape = (-1,) if shape is None else ((shape,) if isinstance(shape, int) else tuple(int(s) for s in shape))
        if shape and shape[0] == 0:
            raise InvalidArgument("shape has 0 rows: give the number of rows, or -1 for all the file holds")
        if not shape or any(s < 0 for s in shape[1:]) or (shape[0] < 0 and shape[0] != -1):
            raise InvalidArgument(f"bad shape {shape}: rows first (or -1 for 'from the file size'), then the row's shape")
        self.row_shape = shape[1:]
        row_elems = int(np.prod(self.row_shape)) if self.row_shape else 1
        row_bytes = row_elems * self.dtype.itemsize
        if row_bytes == 0:
            raise InvalidArgument(f"rows of shape {self.row_shape} hold no bytes")
        if direct is not None and direct not in _DIRECT:
            raise InvalidArgument(f"direct must be one of {sorted(_DIRECT)}, not {direct!r}")
        layout, members = _layout(path, stripe, mirror, chunk)
        served = path is not None and _server.current() is not None  # the server has it (deepwell.connect)
        if path is not None:
            path = os.fsdecode(path)  # str, bytes or a PathLike
            if served and (create or offset):
                raise InvalidArgument("a server's datasets are made by its config: no create or offset with a server")
            if not served and not create and not os.path.exists(path):
                raise FileNotFoundError(2, "No such file (deepwell.Array)", path)
            if create and shape[0] < 0:
                raise InvalidArgument("create=True needs the number of rows in shape")
        elif members:
            if create and shape[0] < 0:
                raise InvalidArgument("create=True needs the number of rows in shape")
        elif shape[0] < 0:
            raise InvalidArgument("host memory (path=None) needs the number of rows in shape")

        o = _lib.sized(_lib.ArrayOptions, lib.dw_array_options_init)
        o.path = path.encode() if path is not None else None
        _put(o, "host_bytes", "the rows' bytes (shape)", 0 if path is not None or members else shape[0] * row_bytes)
        member_paths = (ctypes.c_char_p * len(members))(*(m.encode() for m in members))  # alive until the open
        if members:
            o.members = ctypes.cast(member_paths, ctypes.c_void_p).value
            o.member_count = len(members)
            o.layout = _lib.LAYOUTS[layout]
            o.chunk_bytes = parse_bytes(chunk) if chunk is not None else 0
        offset = _put(o, "offset", "offset", offset)
        _put(o, "length", "the rows' bytes (shape)", shape[0] * row_bytes if shape[0] >= 0 and not create else 0)
        _put(o, "row_bytes", "a row's bytes (shape)", row_bytes)
        _set_cache(o.cache, device=_device_ordinal(device), page_size=page_size, cache_size=cache_size, odirect=odirect, direct=direct,
                   pollers=pollers, cpu_threads=cpu_threads, queue_pairs=queue_pairs, timeout=timeout)
        o.writable = int(bool(writable or create or (path is None and not members)))
        o.create = int(bool(create))
        _put(o, "create_bytes", "the rows' bytes (shape)", shape[0] * row_bytes if create else 0)
        o.cache_reads = int(bool(cache_reads))
        if shape[0] >= 0 and path is not None and not create and not served:
            have = os.stat(path).st_size if os.path.isfile(path) else None
            need = offset + shape[0] * row_bytes
            if have is not None and have < need:
                raise InvalidArgument(
                    f"{path} has {have} bytes, but shape {shape} of {self.dtype} from offset {offset} needs {need} bytes")
        h = ctypes.c_void_p()
        check(lib.dw_array_open(ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        info = _lib.Info()
        check(lib.dw_array_info_get(h, ctypes.byref(info)))
        self.path = path
        self.layout = layout  # "stripe" or "mirror" for an array of drives, else None
        self.members = tuple(members)
        self.rows = info.rows
        self.row_bytes = info.row_bytes
        self.page_size = info.page_size
        self.cache_bytes = info.cache_bytes
        self.device = info.device
        self.writable = bool(info.writable)
        self.direct_tier = bool(info.direct_tier)
        self.in_place = bool(info.in_place)
        self.backend = info.backend.decode()
        # How misses are filled, in words (the direct tier, a server's host tier, or which controller's
        # queues, and why a faster route was not taken): a fallback is never silent.
        self.route = info.route.decode()
        self.shape = (self.rows,) + self.row_shape
        self._hv = h.value
        _open_arrays.add(self)

    # ---- lifetime ----
    def close(self) -> None:
        """Waits for the GPU, writes dirty pages back (writable arrays) and frees everything (after the
        calls running on other threads)."""
        h = self._take_for_close()
        if h is not None:
            check(lib.dw_array_close(h))

    def __enter__(self) -> "Array":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if self._h is not None:
                lib.dw_array_close(self._h)
        except Exception:
            pass

    def _what(self) -> str:
        return "the deepwell array"

    def _handle(self):
        if self._h is None:
            raise InvalidArgument("the deepwell array is closed")
        return self._hv

    def __len__(self) -> int:
        return self.rows

    def __repr__(self) -> str:
        where = "cpu" if self.device < 0 else f"cuda:{self.device}"
        what = f"{self.layout}={list(self.members)!r}" if self.layout else repr(self.path)
        return (f"deepwell.Array({what}, shape={self.shape}, dtype={self.dtype}, device={where}, "
                f"cache={self.cache_bytes >> 20} MiB in {self.page_size} B pages, "
                f"{('direct tier, read in place' if self.in_place else 'direct tier') if self.direct_tier else self.backend})")

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0

    # ---- gathers ----
    def _index(self, idx) -> _interop.View:
        if isinstance(idx, (list, tuple, range)):
            arr = np.asarray(idx)
            if arr.size and arr.dtype.kind not in "iu":  # [True, False] as rows 1, 0; [1.7] as row 1
                raise IndexError(f"row indices must be ints, not {arr.dtype} values")
            idx = arr.astype(np.int64) if arr.size else np.zeros(0, np.int64)
        if isinstance(idx, np.ndarray) and idx.dtype.kind in "iu":
            idx = _native_indices(idx)
        v = _interop.view(idx)
        if v.kind not in "iu" or v.itemsize not in (4, 8):
            raise InvalidArgument(
                f"indices must be integers (int32 or int64 on a GPU), not a {v.kind}{v.itemsize * 8} array")
        if len(v.shape) != 1:
            raise InvalidArgument(f"indices must be one-dimensional, not of shape {v.shape}")
        if not v.contiguous:
            raise InvalidArgument("indices must be contiguous")
        if v.cuda and not self.on_gpu:
            raise InvalidArgument("GPU indices for an array with CPU clients (device='cpu'): pass host indices")
        return v

    def _new_out(self, n: int, like: _interop.View):
        shape = (n,) + self.row_shape
        if not self.on_gpu:
            if like.framework == "torch":
                import torch
                return torch.empty(shape, dtype=self.dtype.torch())
            return np.empty(shape, dtype=self.dtype.numpy())
        # The index's framework; else torch if the caller uses it, else CuPy, else torch.
        uses_torch = like.framework == "torch" or (like.framework != "cupy" and "torch" in sys.modules)
        for name in (("torch",) if uses_torch else ("cupy", "torch")):
            try:
                module = __import__(name)
            except ImportError:
                continue
            if name == "torch":
                return module.empty(shape, dtype=self.dtype.torch(), device=f"cuda:{self.device}")
            with module.cuda.Device(self.device):
                return module.empty(shape, dtype=self.dtype.numpy())
        raise InvalidArgument("a GPU gather needs PyTorch or CuPy to allocate its output, or out=")

    def _check_rows(self, v: _interop.View, n: int, what: str) -> None:
        if v.nbytes != n * self.row_bytes or not v.contiguous:
            raise InvalidArgument(f"{what} must be a contiguous array of {n} rows of {self.row_bytes} bytes "
                                  f"(shape {(n,) + self.row_shape} of {self.dtype}), not shape {v.shape} of "
                                  f"{v.itemsize}-byte elements{'' if v.contiguous else ' (not contiguous)'}")
        # Rows of another element type would be read as this one's bits (or written so).
        # ('V': a type the view could not name, torch's uint16 say: its size alone is checked.)
        if (v.kind != "V" and v.kind != self.dtype.kind()) or v.itemsize != self.dtype.itemsize:
            raise InvalidArgument(f"{what} holds {v.itemsize}-byte elements of kind '{v.kind}'; this array's are "
                                  f"{self.dtype} (view the memory as {self.dtype} to mean its bits)")
        owner = v.owner
        if what == "out" and isinstance(owner, np.ndarray) and (not owner.flags.writeable or
                                                                owner.dtype.byteorder == ">"):
            raise InvalidArgument("out is read-only" if not owner.flags.writeable
                                  else "out is big-endian: the rows are written in this machine's order")
        if isinstance(owner, np.ndarray) and owner.dtype.byteorder == ">":
            raise InvalidArgument(f"{what} is big-endian: the rows are read in this machine's order")
        if self.on_gpu and not v.cuda:
            raise InvalidArgument(f"{what} is in host memory; this array's clients are GPU {self.device}: "
                                  "pass a CUDA tensor")
        if not self.on_gpu and v.cuda:
            raise InvalidArgument(f"{what} is GPU memory; this array has CPU clients: pass host memory")

    def gather(self, idx, out=None, *, stream=None, check: bool = True):
        """Rows ``idx`` (int32/int64, 1-D) into a new array (or ``out``), shaped ``(len(idx),) + row_shape``.

        The result is of the index's kind: a torch tensor for a torch index, CuPy for CuPy, NumPy for NumPy
        (CPU clients). GPU work runs on ``stream`` (default: the index framework's current stream).
        ``check=True`` waits for it and raises on a bad index or I/O error; ``check=False`` returns at
        once and leaves errors to the next ``check()``.
        """
        v = self._index(idx)
        if out is None:
            out = self._new_out(v.shape[0], v)
        self._rows_call(lib.dw_array_gather, v, out, "out", stream, check)
        return out

    def scatter(self, idx, src, *, stream=None, check: bool = True) -> None:
        """Writes rows of ``src`` to rows ``idx`` (dirty in the cache until ``flush()``)."""
        self._rows_call(lib.dw_array_scatter, self._index(idx), src, "src", stream, check)

    @_lib.holding
    def _rows_call(self, fn, v: _interop.View, rows, what: str, stream, check: bool) -> None:
        h = self._handle()
        n = v.shape[0]
        rv = _interop.view(rows)
        self._check_rows(rv, n, what)
        s = _interop.stream_handle(stream) if stream is not None else _interop.current_stream(
            v if v.cuda else rv, self.device)
        _lib.check(fn(h, v.ptr, v.itemsize * 8, 0 if v.cuda else 1, n, rv.ptr, s))
        if check:
            _lib.check(lib.dw_array_check(h, s))

    def _key_indices(self, key):
        """Row indices of an int, a slice, or an index array."""
        if isinstance(key, (bool, np.bool_)):
            raise IndexError("a boolean is not a row index (a[True] would be row 1)")
        if isinstance(key, tuple):
            raise IndexError(f"a[{', '.join(map(repr, key))}]: an array is indexed by rows only "
                             "(a[i][j] for an element of row i; a[[i, j]] for rows i and j)")
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if i < 0:
                i += self.rows
            if not 0 <= i < self.rows:
                raise IndexError(f"row {int(key)} is out of range for {self.rows} rows")
            return np.array([i], dtype=np.int64), True
        if isinstance(key, slice):
            start, stop, step = key.indices(self.rows)
            r = np.arange(start, stop, step, dtype=np.int64)
            torch = sys.modules.get("torch")
            if self.on_gpu and torch is not None:
                r = torch.arange(start, stop, step, dtype=torch.int64, device=f"cuda:{self.device}")
            return r, False
        if key is None or key is Ellipsis or isinstance(key, (float, complex, str, bytes)):
            raise IndexError(f"a[{key!r}]: rows are indexed by an int, a slice or an array of ints")
        if isinstance(key, (list, tuple, range)):
            arr = np.asarray(key)
            if arr.size and arr.dtype.kind not in "iu":
                what = "booleans (masks are not taken: a[np.flatnonzero(mask)])" if arr.dtype.kind == "b" else \
                    f"{arr.dtype} values"
                raise IndexError(f"row indices must be ints, not {what}")
        return key, False

    def __getitem__(self, key):
        idx, single = self._key_indices(key)
        out = self.gather(idx)
        return out[0] if single else out

    def __setitem__(self, key, value) -> None:
        idx, single = self._key_indices(key)
        if not hasattr(value, "shape"):  # a number or a list: broadcast to the rows, as NumPy would
            n = 1 if single else len(idx)
            value = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=self.dtype.numpy()),
                                                         (n,) + self.row_shape))
        elif single:
            value = value.reshape((1,) + tuple(value.shape))
        self.scatter(idx, value)

    # ---- state ----
    @_lib.holding
    def check(self, stream=None) -> None:
        """Waits for ``stream`` (default 0) and raises the first error of earlier unchecked calls."""
        _lib.check(lib.dw_array_check(self._handle(), _interop.stream_handle(stream) if stream is not None else 0))

    @_lib.holding
    def flush(self) -> None:
        """Waits for the GPU, writes dirty pages back, and makes them durable (fdatasync)."""
        _lib.check(lib.dw_array_flush(self._handle()))

    @_lib.holding
    def clear(self) -> None:
        """Flushes (writable arrays) and empties the cache: the next reads are misses."""
        _lib.check(lib.dw_array_clear(self._handle()))

    @_lib.holding
    def stats(self) -> dict[str, Any]:
        """Cache counters since the last reset_stats(); controller counters since open."""
        st = _lib.Stats()
        _lib.check(lib.dw_array_stats_get(self._handle(), ctypes.byref(st)))
        d = {name: getattr(st, name) for name, _ in _lib.Stats._fields_}
        probes = d["hits"] + d["misses"]
        d["hit_rate"] = d["hits"] / probes if probes else 0.0
        return d

    @_lib.holding
    def reset_stats(self) -> None:
        _lib.check(lib.dw_array_stats_reset(self._handle()))


def open(path=None, **kwargs) -> Array:  # noqa: A001 (mirrors numpy.memmap / h5py.File)
    """``deepwell.open(path, dtype=..., shape=..., ...)``: an Array (see Array for the arguments)."""
    return Array(path, **kwargs)
