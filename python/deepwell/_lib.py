"""ctypes binding of deepwell's C ABI (include/deepwell/c/deepwell.h).

The package talks to one shared library, libdeepwell_c.so, through a plain C
ABI rather than a compiled extension module: one binary serves every Python 3
version (it is built once by CMake, here or in CI, and carried to GPU
machines with another Python), needs no Python headers to build, imports on
machines without a CUDA driver, and other languages can load it too. A call
through ctypes costs about a microsecond, far below a kernel launch.
"""
from __future__ import annotations

import atexit
import functools
import ctypes
import os
import pathlib
import sys
import threading
import weakref

ABI_VERSION = 7

OK, EINVAL, EIO, ERANGE, ENOCUDA, ERUNTIME = 0, -1, -2, -3, -4, -5


class Error(RuntimeError):
    """Base class of deepwell's errors (each also derives from the matching builtin)."""


class InvalidArgument(Error, ValueError):
    """A bad argument: sizes, dtypes, memory on the wrong device."""


class IOFailure(Error, OSError):
    """A file that cannot be opened, read or written; an I/O error status."""


class IndexOutOfRange(Error, IndexError):
    """A row index outside the dataset."""


class CudaUnavailable(Error):
    """No CUDA driver or device, or a build without CUDA."""


_ERRORS = {EINVAL: InvalidArgument, EIO: IOFailure, ERANGE: IndexOutOfRange, ENOCUDA: CudaUnavailable}


# The C types of the header, by short names: the structures and signatures below (and those of
# checkpoint.py, kv.py, table.py, _server.py) read as compactly as their C declarations.
P, c_str, ptr = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER
i32, u32, u64, f64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_double


def fields(*groups) -> list:
    """A ctypes ``_fields_`` list from (type, "name name ...") groups, in the header's order
    (test_abi.py holds every structure to deepwell.h field by field)."""
    return [(name, t) for t, names in groups for name in names.split()]


class CacheOptions(ctypes.Structure):
    """dw_cache_options: the page cache's settings, one set of fields wherever a cache is made."""
    _fields_ = fields((i32, "device"), (u32, "page_size"), (u64, "cache_bytes"),
                      (u32, "queue_pairs queue_entries pollers cpu_threads"), (i32, "odirect direct_files"),
                      (f64, "timeout_s"))


def options_fields(*groups) -> list:
    """The fields of a dw_*_options: ``size`` first (the library reads only that many bytes, so an
    older caller's shorter structure still works), the path, the entry point's own groups, and the
    cache's settings last."""
    return fields((u32, "size"), (c_str, "path"), *groups, (CacheOptions, "cache"))


def sized(cls, init):
    """A dw_*_options structure holding its entry point's defaults (``init``, its dw_*_options_init),
    with ``size`` this side's sizeof: the bytes the library may read are the ones Python has."""
    o = cls()
    init(ctypes.byref(o))
    o.size = ctypes.sizeof(o)
    return o


class ArrayOptions(ctypes.Structure):
    # The members of an array of drives come after the cache: they were appended (the size says so).
    _fields_ = options_fields((u64, "host_bytes offset length"), (u32, "row_bytes"),
                              (i32, "writable create cache_reads"), (u64, "create_bytes")) + fields(
        (P, "members"), (u32, "member_count"), (i32, "layout"), (u64, "chunk_bytes"))


LAYOUTS = {"stripe": 1, "mirror": 2}  # DW_LAYOUT_STRIPE, DW_LAYOUT_MIRROR


class Info(ctypes.Structure):
    _fields_ = fields((u64, "rows"), (u32, "row_bytes page_size"), (u64, "cache_bytes"), (u32, "cache_pages"),
                      (i32, "device writable direct_tier in_place"), (ctypes.c_char * 16, "backend"),
                      (ctypes.c_char * 256, "route"))


class Stats(ctypes.Structure):
    _fields_ = fields(
        (u64, "accesses hits misses evictions writebacks bytes_read bytes_written direct_fills controller_reads "
              "controller_bytes_read controller_writes controller_bytes_written"),
        (f64, "controller_cpu_seconds"), (u64, "tier_fills tier_retries"))


def _library_path() -> str:
    env = os.environ.get("DEEPWELL_LIBRARY")
    if env:
        return env
    return str(pathlib.Path(__file__).with_name("libdeepwell_c.so"))


def bind(lib: ctypes.CDLL, sig: dict, part: str = "") -> None:
    """Sets each function's argtypes and restype from sig: {name: [args]} for the functions that
    return a status (most: check() reads it), {name: ([args], restype)} for the others.
    part ("the key-value store (src/capi/kv_api.cpp)"): a library without it is reported as
    built without that part."""
    for name, entry in sig.items():
        args, res = entry if isinstance(entry, tuple) else (entry, ctypes.c_int)
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            if not part:
                raise
            raise ImportError(f"{_library_path()} has no {name}: it was built without {part}; rebuild it") from e
        fn.argtypes = args
        fn.restype = res


def _load() -> ctypes.CDLL:
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"deepwell's library {path} is missing: install the package with `pip install .` "
            "(which builds it), or point DEEPWELL_LIBRARY at a built libdeepwell_c.so")
    lib = ctypes.CDLL(path)
    rows = [P, P, i32, i32, u64, P, ctypes.c_size_t]  # handle, indices, index bits, on host, count, rows, stream
    bind(lib, {
        "dw_abi_version": ([], ctypes.c_int),
        "dw_last_error": ([], c_str),
        "dw_array_options_init": ([ptr(ArrayOptions)], None),
        "dw_parse_size": [c_str, ptr(u64)],
        "dw_check_settings": [],
        "dw_cuda_device_count": [ptr(i32)],
        "dw_array_open": [ptr(ArrayOptions), ptr(P)],
        "dw_array_info_get": [P, ptr(Info)],
        "dw_array_gather": rows,
        "dw_array_scatter": rows,
        "dw_array_check": [P, ctypes.c_size_t],
        "dw_array_stats_get": [P, ptr(Stats)],
        "dw_array_close": [P], "dw_array_flush": [P], "dw_array_clear": [P], "dw_array_stats_reset": [P],
        "dw_uring_read_rows": [c_str, i32, u64, u32, P, u64, u32, u32, P, ptr(f64)],
    })
    version = lib.dw_abi_version()
    if version != ABI_VERSION:
        raise ImportError(f"{path} speaks C ABI version {version}; this package needs {ABI_VERSION}: rebuild it")
    return lib


lib = _load()


def check(rc: int) -> None:
    """Raises the exception that matches a C ABI return code."""
    if rc != OK:
        message = lib.dw_last_error().decode(errors="replace")
        raise _ERRORS.get(rc, Error)(message)


# Every DEEPWELL_* setting checked once, at import: a bad one is named now, not ignored by the calls that
# never read it (DEEPWELL_LOG=loud was), as the command line checks them before a command runs.
check(lib.dw_check_settings())


def closed_at_exit(who: str) -> weakref.WeakSet:
    """A set for the handles a module opens, each closed when Python exits if still open. That runs
    before the CUDA runtime's own exit handlers (they come after Python's), so a program that never
    calls close() still flushes and frees in order instead of touching a CUDA runtime that is gone.
    ``who`` ("deepwell.kv") names the module in what is printed when a close fails then."""
    live: weakref.WeakSet = weakref.WeakSet()

    @atexit.register
    def _close_all() -> None:
        for h in list(live):
            try:
                h.close()
            except Exception as e:  # nothing left to raise to
                print(f"{who}: closing {h!r} at exit: {e}", file=sys.stderr)

    return live


class CallGuard:
    """Calls on a handle from several threads, and a close() among them: a method marked @holding counts
    itself in while it runs, and close() refuses new calls, then waits for those running before the C
    close frees the handle (a close beside a running gather, set, save or search freed what the call
    was using: a segfault). The owner sets ``_h`` (None once closed)."""
    _h = None
    _calls = 0

    def _cond(self) -> threading.Condition:
        return self.__dict__.setdefault("_cv", threading.Condition())  # setdefault: one even if two race

    def _what(self) -> str:
        return "the handle"

    def _enter_call(self) -> None:
        cv = self._cond()
        with cv:
            if self._h is None:
                raise InvalidArgument(f"{self._what()} is closed")
            self._calls += 1

    def _leave_call(self) -> None:
        cv = self._cond()
        with cv:
            self._calls -= 1
            if not self._calls:
                cv.notify_all()

    def _take_for_close(self):
        """The handle, once no call runs on it (None if already closed); new calls are refused from now."""
        cv = self._cond()
        with cv:
            h, self._h = self._h, None
            while h is not None and self._calls:
                cv.wait()
            return h


def holding(method):
    """Marks a method that uses the C handle: close() waits for it (CallGuard)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._enter_call()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave_call()
    return call


class Handle(CallGuard):
    """What every C ABI handle's owner shares: close() (once; later calls do nothing; it waits for the
    calls running on other threads), use as a context manager, and a close when it is collected. A
    subclass sets ``_h`` (None once closed), names its ``dw_*_close`` in ``_close_name``, says what it is
    in ``_what()`` for the closed-handle error, and marks the methods that use the handle @holding."""
    _close_name = ""

    def close(self) -> None:
        h = self._take_for_close()
        if h is not None:
            check(getattr(lib, self._close_name)(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if self._h is None:
            raise InvalidArgument(f"{self._what()} is closed")
        return self._h

    # A handle on a file with a device says "NAME('PATH', STATE, cpu|cuda:N)": a subclass names
    # itself in ``_repr_name`` and says its open state in ``_open_state()``.
    _repr_name = ""

    def _open_state(self) -> str:
        return "open"

    def __repr__(self) -> str:
        if not self._repr_name:
            return object.__repr__(self)
        where = "cpu" if getattr(self, "device", -1) < 0 else f"cuda:{self.device}"
        state = "closed" if self._h is None else self._open_state()
        return f"{self._repr_name}({getattr(self, 'path', '')!r}, {state}, {where})"
