"""Crash-safe checkpoints of tensors (docs/checkpoints.md).

    import deepwell.checkpoint as ckpt
    ckpt.save(model.state_dict(), "run.ckpt")              # CUDA or CPU tensors
    ckpt.load("run.ckpt", into=model.state_dict())         # in place, checked
    sd = ckpt.load("run.ckpt")                             # new tensors (CPU unless device=...)

A save writes the tensors into the slot the newest checkpoint does not use,
makes it durable, then switches the superblock: a crash at any moment leaves
the previous checkpoint or the new one whole. Only the pages that changed
since that slot's contents are written. load() checks every page against
the checkpoint's checksums and names the tensor and the bytes that do not
match. The file is read and written through deepwell's page cache (on the
tensors' GPU, or on the host for CPU tensors), through the C ABI.

Values are tensors (torch, or NumPy arrays); an optimizer's nested state
can be flattened first with flatten().
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import stat
import sys
from typing import Any, Dict, Optional

import numpy as np

from . import _lib, _server
from ._lib import InvalidArgument, IOFailure, P, c_str, check, f64, fields, i32, lib, options_fields, ptr, u32, u64

__all__ = ["save", "load", "verify", "generation", "manifest", "flatten", "CheckpointStore"]

_OPEN, _CREATE = 0, 1


class _Tensor(ctypes.Structure):
    _fields_ = fields((c_str, "name dtype"), (ptr(ctypes.c_int64), "shape"), (i32, "ndim"), (u64, "bytes"))


class _Options(ctypes.Structure):
    _fields_ = options_fields((i32, "mode writable"), (u32, "unit"), (i32, "allow_older"))


class _SaveInfo(ctypes.Structure):
    _fields_ = fields((u64, "generation data_bytes bytes_written units_written units_total"),
                      (i32, "incremental slot"), (f64, "seconds"))


def _bind() -> None:
    T = ptr(_Tensor)
    _lib.bind(lib, {
        "dw_checkpoint_options_init": ([ptr(_Options)], None),
        "dw_checkpoint_open": [ptr(_Options), T, u32, ptr(P)],
        "dw_checkpoint_close": [P],
        "dw_checkpoint_generation": [P, ptr(u64)],
        "dw_checkpoint_count": [P, ptr(u32)],
        "dw_checkpoint_tensor_at": [P, u32, T],
        "dw_checkpoint_bytes_needed": [T, u32, u32, ptr(u64)],
        "dw_checkpoint_save": [P, ptr(P), ptr(i32), u32, ptr(_SaveInfo)],
        "dw_checkpoint_load": [P, ptr(P), ptr(i32), u32, i32],
        "dw_checkpoint_verify": [P],
    }, "checkpoints (src/capi/checkpoint_api.cpp)")


_bind()


# ---- tensors ----

class _Item:
    """One tensor as the C ABI sees it: contiguous memory, its dtype name, shape, bytes, and where it lives."""

    def __init__(self, name: str, value: Any, for_write: bool):
        self.name = name
        self.value = value          # what the caller passed
        self.scratch = None         # a contiguous copy, when the value is not contiguous
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            t = value.detach()
            self.kind = "torch"
            self.dtype = str(t.dtype).replace("torch.", "")
            self.shape = tuple(int(s) for s in t.shape)
            if not t.is_contiguous():
                self.scratch = t.contiguous() if for_write else torch.empty_like(t, memory_format=torch.contiguous_format)
                t = self.scratch
            self.nbytes = t.numel() * t.element_size()
            self.ptr = t.data_ptr()
            self.cuda = t.device.index if t.is_cuda else None
            if t.is_cuda and self.cuda is None:
                self.cuda = torch.cuda.current_device()
            self.holder = t
        elif isinstance(value, np.ndarray) or (for_write and np.isscalar(value)):
            a = np.asarray(value)
            if a.dtype.hasobject:
                raise InvalidArgument(f"'{name}' holds Python objects (dtype {a.dtype}): a checkpoint holds plain data")
            if a.dtype.byteorder == ">":
                raise InvalidArgument(f"'{name}' is big-endian ({a.dtype.str}): its manifest could not say so; "
                                      "save it in this machine's order")
            # What load can make again from the manifest: numbers of one type. Records, strings and
            # raw bytes saved but could not be loaded (or loaded into another record of their size).
            if a.dtype.kind not in "biufc" or a.dtype.fields is not None or a.dtype.subdtype is not None:
                raise InvalidArgument(f"'{name}' has dtype {a.dtype}: a checkpoint holds arrays of one number "
                                      "type (bool, int, uint, float, complex); save records or strings as uint8 "
                                      "bytes (a.view(np.uint8))")
            self.kind = "numpy"
            self.dtype = a.dtype.name if a.dtype.names is None else a.dtype.str
            self.shape = tuple(int(s) for s in a.shape)
            if not for_write and not a.flags.writeable:
                raise InvalidArgument(f"'{name}' is a read-only array: load needs arrays it may write")
            if not a.flags.c_contiguous:
                self.scratch = np.ascontiguousarray(a) if for_write else np.empty(a.shape, a.dtype)
                a = self.scratch
            self.nbytes = a.nbytes
            self.ptr = a.ctypes.data
            self.cuda = None
            self.holder = a
        else:
            raise InvalidArgument(f"'{name}' is a {type(value).__name__}, not a tensor or a NumPy array "
                                  "(flatten nested state with deepwell.checkpoint.flatten)")
        if self.nbytes and not self.ptr:
            raise InvalidArgument(f"'{name}' has no data pointer")

    def spec(self) -> tuple:
        return (self.name, self.dtype, self.shape, self.nbytes)


def _items(state: Dict[str, Any], for_write: bool) -> list:
    if not hasattr(state, "items"):
        raise InvalidArgument(f"expected a dict of tensors (a state_dict), not a {type(state).__name__}")
    out = []
    for k, v in state.items():
        if not isinstance(k, str):
            raise InvalidArgument(f"key {k!r} is not a string (flatten nested state with deepwell.checkpoint.flatten)")
        out.append(_Item(k, v, for_write))
    return out


def flatten(state: Any, prefix: str = "", sep: str = ".") -> Dict[str, Any]:
    """Nested dicts, lists and tuples of tensors (an optimizer's state_dict) as one flat dict:
    ``{"state.0.exp_avg": t, "param_groups.0.lr": np.float64(0.001), ...}``. Python numbers and
    booleans become 0-d NumPy arrays; None and strings are left out."""
    out: Dict[str, Any] = {}

    def walk(x, key):
        torch = sys.modules.get("torch")
        if (torch is not None and isinstance(x, torch.Tensor)) or isinstance(x, np.ndarray):
            out[key] = x
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{key}{sep}{k}" if key else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{key}{sep}{i}" if key else str(i))
        elif isinstance(x, (bool, int, float, np.number, np.bool_)):
            out[key] = np.asarray(x)
        # None, strings and other objects are not tensors: left out

    walk(state, prefix)
    return out


class _Where:
    """Only where a value lives (its CUDA device or None)."""

    def __init__(self, v):
        torch = sys.modules.get("torch")
        self.cuda = None
        if torch is not None and isinstance(v, torch.Tensor) and v.is_cuda:
            self.cuda = v.device.index if v.device.index is not None else torch.cuda.current_device()


def _devices(items) -> Optional[int]:
    devs = {it.cuda for it in items if it.cuda is not None}
    if len(devs) > 1:
        raise InvalidArgument(f"tensors on several GPUs ({sorted(devs)}): a checkpoint's GPU tensors share one device")
    return devs.pop() if devs else None


def _sync_cuda(device: Optional[int]) -> None:
    if device is None:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.cuda.synchronize(device)


def _manifest(specs):
    """A ctypes array of dw_checkpoint_tensor and what keeps its memory alive."""
    keep = []
    arr = (_Tensor * max(1, len(specs)))()
    for i, (name, dtype, shape, nbytes) in enumerate(specs):
        n = name.encode()
        d = dtype.encode()
        sh = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        keep += [n, d, sh]
        arr[i].name = n
        arr[i].dtype = d
        arr[i].shape = ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64)) if shape else None
        arr[i].ndim = len(shape)
        arr[i].bytes = nbytes
    return arr, keep


def _device_ordinal(device) -> int:
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    d = str(device)
    if d == "cpu":
        return -1
    if d == "cuda":
        torch = sys.modules.get("torch")
        return torch.cuda.current_device() if torch is not None else 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return int(d[5:])
    raise InvalidArgument(f"device must be 'cpu', 'cuda', 'cuda:N' or an ordinal, not {device!r}")


class CheckpointStore(_lib.Handle):
    """A checkpoint file kept open: ``save`` and ``load`` many times without setting up again.

    ``device``: the GPU whose page cache serves it (None/"cpu": a host cache and CPU threads).
    ``specs``: (name, dtype, shape, bytes) tuples: with ``create`` the manifest of a new store,
    else what the store must hold (None: anything). ``page_size`` (default 64 KiB), ``cache_size``,
    ``odirect``, ``unit`` (bytes per page hash; default: the page size), ``writable``.
    ``allow_older``: if the newest superblock is corrupted (deepwell.IOFailure "the newest superblock
    is corrupted"), open the previous generation instead of raising.
    Opening an existing store first removes a stale ``PATH.deepwell-tmp`` (see ``save``).
    """

    def __init__(self, path, *, device=None, create: bool = False, specs=None, writable: bool = True,
                 page_size: Optional[int] = None, cache_size=None, odirect: bool = False, unit: Optional[int] = None,
                 cpu_threads: int = 0, timeout: Optional[float] = None, allow_older: bool = False):
        from .array import _count, _put, _set_cache
        self._h = None
        self.path = os.fspath(path)
        # A file of this process's (a server's dataset is the server's: its name or path, checked there).
        if not create and _server.current() is None:
            _remove_stale_tmp(self.path, keep_empty=True)
            if not os.path.exists(self.path):
                raise FileNotFoundError(2, "No such file (deepwell.checkpoint)", self.path)
        o = _lib.sized(_Options, lib.dw_checkpoint_options_init)
        o.path = self.path.encode()
        o.mode = _CREATE if create else _OPEN
        o.writable = 1 if (writable or create) else 0
        if unit:
            _put(o, "unit", "unit", unit)
        _set_cache(o.cache, device=_device_ordinal(device), page_size=page_size, cache_size=cache_size,
                   cpu_threads=cpu_threads, odirect=odirect, timeout=timeout)
        o.allow_older = 1 if allow_older else 0
        arr, keep = _manifest(specs or [])
        h = ctypes.c_void_p()
        check(lib.dw_checkpoint_open(ctypes.byref(o), arr if specs is not None else None,
                                     len(specs) if specs else 0, ctypes.byref(h)))
        del keep
        self._h = h
        self.device = o.cache.device

    # ---- what it holds ----
    @property
    @_lib.holding
    def generation(self) -> int:
        g = ctypes.c_uint64()
        check(lib.dw_checkpoint_generation(self._handle(), ctypes.byref(g)))
        return g.value

    @_lib.holding
    def manifest(self) -> list:
        """(name, dtype, shape, bytes) of every tensor, in the store's order."""
        n = ctypes.c_uint32()
        check(lib.dw_checkpoint_count(self._handle(), ctypes.byref(n)))
        out = []
        for i in range(n.value):
            t = _Tensor()
            check(lib.dw_checkpoint_tensor_at(self._handle(), i, ctypes.byref(t)))
            shape = tuple(t.shape[k] for k in range(t.ndim))
            out.append((t.name.decode(), (t.dtype or b"").decode(), shape, int(t.bytes)))
        return out

    # ---- save, load, verify ----
    @_lib.holding
    def save(self, state: Dict[str, Any]) -> dict:
        """Saves the tensors (the store's manifest, in any order) as the next generation;
        returns once durable, with what was written."""
        items = _items(state, for_write=True)
        specs = self.manifest()
        by_name = {it.name: it for it in items}
        # The C call reads each tensor's manifest bytes from its pointer: a
        # smaller tensor would be read past its end.
        for name, dtype, shape, nbytes in specs:
            it = by_name.get(name)
            if it is not None and it.nbytes != nbytes:
                raise InvalidArgument(f"'{name}' is {it.dtype} {it.shape} ({it.nbytes} bytes); the checkpoint "
                                      f"{self.path} holds {dtype} {tuple(shape)} ({nbytes} bytes)")
        ptrs, on_dev = self._pointers(specs, by_name, strict=True, op="save")
        _sync_cuda(_devices(items))
        info = _SaveInfo()
        check(lib.dw_checkpoint_save(self._handle(), ptrs, on_dev, len(specs), ctypes.byref(info)))
        return {f: getattr(info, f) for f, _ in _SaveInfo._fields_} | {"incremental": bool(info.incremental)}

    @_lib.holding
    def load(self, into: Optional[Dict[str, Any]] = None, *, device="cpu", strict: bool = True,
             verify_first: bool = False, numpy: bool = False) -> Dict[str, Any]:
        """The newest checkpoint into ``into`` (in place; its tensors must match the store's dtypes
        and shapes) or, with ``into=None``, into new tensors on ``device`` (torch where it is
        installed and ``numpy`` is not set, else NumPy). ``strict=False``: names missing on either side
        are skipped."""
        specs = self.manifest()
        if into is None:
            into = {name: _empty(name, dtype, shape, nbytes, device, numpy) for name, dtype, shape, nbytes in specs}
        items = _items(into, for_write=False)
        by_name = {it.name: it for it in items}
        for it in items:
            want = next((s for s in specs if s[0] == it.name), None)
            if want is None:
                continue
            if (it.dtype, it.shape, it.nbytes) != tuple(want[1:]):
                raise InvalidArgument(f"'{it.name}' is {it.dtype} {it.shape} ({it.nbytes} bytes); the checkpoint "
                                      f"{self.path} holds {want[1]} {tuple(want[2])} ({want[3]} bytes)")
        ptrs, on_dev = self._pointers(specs, by_name, strict=strict, op="load")
        dev = _devices(items)
        _sync_cuda(dev)
        check(lib.dw_checkpoint_load(self._handle(), ptrs, on_dev, len(specs), 1 if verify_first else 0))
        for it in items:
            if it.scratch is not None:
                if it.kind == "torch":
                    it.value.copy_(it.scratch)
                else:
                    np.copyto(it.value, it.scratch)
        return into

    @_lib.holding
    def verify(self) -> None:
        """Reads the newest checkpoint and checks every page, copying nothing (raises as load does)."""
        check(lib.dw_checkpoint_verify(self._handle()))

    # ---- lifetime: close(), with, and a close when collected (_lib.Handle) ----
    _close_name = "dw_checkpoint_close"

    def _what(self) -> str:
        return "the checkpoint store"

    def _pointers(self, specs, by_name, *, strict: bool, op: str):
        names = [s[0] for s in specs]
        if strict:
            missing = [n for n in names if n not in by_name]
            extra = [n for n in by_name if n not in set(names)]
            if missing or extra:
                raise InvalidArgument(
                    f"{op}: the tensors do not match the checkpoint {self.path}"
                    + (f"; missing: {missing[:5]}{' ...' if len(missing) > 5 else ''}" if missing else "")
                    + (f"; not in it: {extra[:5]}{' ...' if len(extra) > 5 else ''}" if extra else ""))
        ptrs = (ctypes.c_void_p * max(1, len(specs)))()
        on_dev = (ctypes.c_int32 * max(1, len(specs)))()
        for i, n in enumerate(names):
            it = by_name.get(n)
            if it is None:
                continue
            if it.cuda is not None and it.cuda != self.device:
                raise InvalidArgument(f"'{n}' is on cuda:{it.cuda}; the checkpoint store works on "
                                      f"{'the CPU' if self.device < 0 else f'cuda:{self.device}'}")
            ptrs[i] = it.ptr or None
            on_dev[i] = 1 if it.cuda is not None else 0
        return ptrs, on_dev


def _empty(name, dtype, shape, nbytes, device, as_numpy=False):
    torch = None if as_numpy else sys.modules.get("torch")
    if torch is None and not as_numpy:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    if torch is not None and hasattr(torch, dtype):
        t = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
        if t.numel() * t.element_size() == nbytes:
            return t
    if device not in (None, "cpu"):
        raise InvalidArgument(f"'{name}' ({dtype}): cannot make a {device} tensor of it without torch")
    try:
        a = np.empty(shape, dtype=np.dtype(dtype))
    except TypeError as e:
        raise InvalidArgument(f"'{name}' has dtype {dtype!r}, which neither torch nor NumPy knows") from e
    if a.nbytes != nbytes:
        raise InvalidArgument(f"'{name}': {dtype} {shape} is {a.nbytes} bytes; the checkpoint holds {nbytes}")
    return a


# ---- the temporary file of a first save ----
#
# A save that makes a new store writes it to PATH.deepwell-tmp and renames
# that over PATH. It holds an exclusive flock on the temporary file from
# creating it until the rename: a temporary file nobody holds a lock on was
# left by a save that was killed (locks go with their process), and opening
# PATH removes it.

_TMP_SUFFIX = ".deepwell-tmp"


def _tmp_path(path: str) -> str:
    return path + _TMP_SUFFIX


def _remove_stale_tmp(path: str, *, keep_empty: bool) -> None:
    """Removes ``PATH.deepwell-tmp`` if it is a regular file no save holds locked. With ``keep_empty``
    an empty one stays: a save creates it empty and locks it just after (an empty file costs nothing; the
    next save replaces it). Nothing else is touched; where it cannot be removed (a read-only directory) it
    stays."""
    tmp = _tmp_path(path)
    try:
        st = os.lstat(tmp)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or (keep_empty and st.st_size == 0):
        return
    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # a save is writing it
        if _same_file(fd, tmp):  # still the file that was checked and locked
            os.unlink(tmp)
    except OSError:
        pass
    finally:
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _create_locked_tmp(path: str) -> int:
    """Creates ``PATH.deepwell-tmp`` (after removing a stale one) and locks it; returns its descriptor,
    which holds the lock until closed."""
    tmp = _tmp_path(path)
    _remove_stale_tmp(path, keep_empty=False)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise IOFailure(f"cannot save {path}: {tmp} exists and is not a stale temporary file of deepwell "
                        "(another save of this path is running, or it is not a regular file)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _allocate(fd: int, specs, page_size: Optional[int], unit: Optional[int]) -> None:
    """Gives a file made for direct I/O its blocks before the first save (an O_DIRECT write into a hole
    serializes on ext4), as the C library does for files it creates itself."""
    arr, keep = _manifest(specs)
    n = ctypes.c_uint64()
    check(lib.dw_checkpoint_bytes_needed(arr, len(specs), unit or page_size or 65536, ctypes.byref(n)))
    del keep
    try:
        os.posix_fallocate(fd, 0, n.value)
    except OSError:
        pass  # the file system cannot allocate: the store is sized sparse


# ---- one call each ----

def save(state: Dict[str, Any], path, *, replace: bool = False, page_size: Optional[int] = None, cache_size=None,
         odirect: bool = False, unit: Optional[int] = None, cpu_threads: int = 0, allow_older: bool = False) -> dict:
    """Saves a dict of tensors (a state_dict; CUDA or CPU tensors, or NumPy arrays) to ``path`` as its next
    checkpoint, and returns once it is durable. A new file is made as a store of these tensors (written
    beside it, as ``PATH.deepwell-tmp``, and renamed into place); an existing one must hold the same names,
    dtypes and shapes, unless ``replace=True`` (then a new store replaces it, atomically). ``allow_older``:
    save on from the previous generation of a store whose newest superblock is corrupted (its slot is
    overwritten). Returns what was written: generation, bytes_written, units_written, units_total,
    incremental, seconds."""
    path = os.fspath(path)
    items = _items(state, for_write=True)
    dev = _devices(items)
    kw = dict(page_size=page_size, cache_size=cache_size, odirect=odirect, cpu_threads=cpu_threads)
    specs = sorted(it.spec() for it in items)  # by name: the order of the dict does not matter
    if _server.current() is not None:
        return _save_on_server(state, path, dev, specs, replace, allow_older, unit, kw)
    if os.path.exists(path) and not replace:
        try:
            s = CheckpointStore(path, device=dev, specs=specs, allow_older=allow_older, **kw)
        except InvalidArgument as e:
            raise InvalidArgument(f"{e} (replace=True makes a new store of these tensors)") from None
        with s:
            return s.save(state)
    # A new store beside the file, renamed over it once it holds the checkpoint.
    tmp = _tmp_path(path)
    fd = _create_locked_tmp(path)
    try:
        if odirect:
            _allocate(fd, specs, page_size, unit)
        with CheckpointStore(tmp, device=dev, create=True, specs=specs, unit=unit, **kw) as s:
            info = s.save(state)
        os.replace(tmp, path)
    except BaseException:
        if _same_file(fd, tmp):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)  # the lock goes with it
    d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(d)
    finally:
        os.close(d)
    return info


def _save_on_server(state, name, dev, specs, replace, allow_older, unit, kw) -> dict:
    """save() in server mode (deepwell.connect()): ``name`` is a dataset the server grants for writing, by
    name or path. The server makes no files for its clients, so a new store is made in place in the
    dataset (a blank one, or any with replace=True): unlike a file's, that is not atomic; a crash while it
    is made leaves no store there."""
    if not replace:
        try:
            s = CheckpointStore(name, device=dev, specs=specs, allow_older=allow_older, **kw)
        except IOFailure as e:
            if "no checkpoint store here" not in str(e):
                raise
        except InvalidArgument as e:
            raise InvalidArgument(f"{e} (replace=True makes a new store of these tensors)") from None
        else:
            with s:
                return s.save(state)
    with CheckpointStore(name, device=dev, create=True, specs=specs, unit=unit, **kw) as s:
        return s.save(state)


def load(path, into: Optional[Dict[str, Any]] = None, *, device="cpu", strict: bool = True,
         verify_first: bool = False, numpy: bool = False, page_size: Optional[int] = None, cache_size=None,
         odirect: bool = False, cpu_threads: int = 0, allow_older: bool = False) -> Dict[str, Any]:
    """The newest checkpoint of ``path``: into ``into`` (a state_dict: its tensors are overwritten in
    place, and must have the checkpoint's dtypes and shapes), or into new tensors on ``device``. Every
    page is checked; a failure raises deepwell.IOFailure naming the tensor and bytes (the tensors may
    then be partly overwritten, unless ``verify_first=True``, which reads the file twice). New tensors
    are torch tensors where torch is installed, NumPy arrays with ``numpy=True`` or without torch.
    If the newest superblock is corrupted (a completed save damaged since), deepwell.IOFailure says so;
    ``allow_older=True`` loads the previous generation instead (checked as any load is)."""
    path = os.fspath(path)
    gpu = None
    if into is not None:
        gpu = _devices([_Where(v) for v in into.values()])
    else:
        o = _device_ordinal(device)
        gpu = o if o >= 0 else None
    with CheckpointStore(path, device=gpu, writable=False, page_size=page_size, cache_size=cache_size,
                         odirect=odirect, cpu_threads=cpu_threads, allow_older=allow_older) as s:
        return s.load(into, device=device, strict=strict, verify_first=verify_first, numpy=numpy)


def verify(path, **kw) -> int:
    """Reads and checks the newest checkpoint of ``path``; returns its generation."""
    with CheckpointStore(path, writable=False, **kw) as s:
        s.verify()
        return s.generation


def generation(path, *, allow_older: bool = False) -> int:
    with CheckpointStore(path, writable=False, allow_older=allow_older) as s:
        return s.generation


def manifest(path, *, allow_older: bool = False) -> list:
    with CheckpointStore(path, writable=False, allow_older=allow_older) as s:
        return s.manifest()
