"""ctypes binding of deepwell's C ABI (include/deepwell/c/deepwell.h).

The package talks to one shared library, libdeepwell_c.so, through a plain C
ABI rather than a compiled extension module: one binary serves every Python 3
version (it is built once by CMake, here or in CI, and carried to GPU
machines with another Python), needs no Python headers to build, imports on
machines without a CUDA driver, and other languages can load it too. A call
through ctypes costs about a microsecond, far below a kernel launch.
"""
from __future__ import annotations

import ctypes
import os
import pathlib

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


class CacheOptions(ctypes.Structure):
    """dw_cache_options: the page cache's settings, one set of fields wherever a cache is made."""
    _fields_ = [
        ("device", ctypes.c_int32),
        ("page_size", ctypes.c_uint32),
        ("cache_bytes", ctypes.c_uint64),
        ("queue_pairs", ctypes.c_uint32),
        ("queue_entries", ctypes.c_uint32),
        ("pollers", ctypes.c_uint32),
        ("cpu_threads", ctypes.c_uint32),
        ("odirect", ctypes.c_int32),
        ("direct_files", ctypes.c_int32),
        ("timeout_s", ctypes.c_double),
    ]


class ArrayOptions(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("path", ctypes.c_char_p),
        ("host_bytes", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("row_bytes", ctypes.c_uint32),
        ("writable", ctypes.c_int32),
        ("create", ctypes.c_int32),
        ("cache_reads", ctypes.c_int32),
        ("create_bytes", ctypes.c_uint64),
        ("cache", CacheOptions),
    ]


class Info(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_uint64),
        ("row_bytes", ctypes.c_uint32),
        ("page_size", ctypes.c_uint32),
        ("cache_bytes", ctypes.c_uint64),
        ("cache_pages", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("writable", ctypes.c_int32),
        ("direct_tier", ctypes.c_int32),
        ("in_place", ctypes.c_int32),
        ("backend", ctypes.c_char * 16),
        ("route", ctypes.c_char * 256),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "accesses", "hits", "misses", "evictions", "writebacks", "bytes_read", "bytes_written",
            "direct_fills", "controller_reads", "controller_bytes_read", "controller_writes",
            "controller_bytes_written",
        )
    ] + [("controller_cpu_seconds", ctypes.c_double), ("tier_fills", ctypes.c_uint64), ("tier_retries", ctypes.c_uint64)]


def _library_path() -> str:
    env = os.environ.get("DEEPWELL_LIBRARY")
    if env:
        return env
    return str(pathlib.Path(__file__).with_name("libdeepwell_c.so"))


def bind(lib: ctypes.CDLL, sig: dict, part: str = "") -> None:
    """Sets each function's argtypes and restype from sig ({name: (args, restype)}).
    part ("the key-value store (src/capi/kv_api.cpp)"): a library without it is reported as
    built without that part."""
    for name, (args, res) in sig.items():
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
    P, u64, i32, u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32
    sig = {
        "dw_abi_version": ([], ctypes.c_int),
        "dw_parse_size": ([ctypes.c_char_p, ctypes.POINTER(u64)], ctypes.c_int),
        "dw_last_error": ([], ctypes.c_char_p),
        "dw_cuda_device_count": ([ctypes.POINTER(i32)], ctypes.c_int),
        "dw_array_options_init": ([ctypes.POINTER(ArrayOptions)], None),
        "dw_array_open": ([ctypes.POINTER(ArrayOptions), ctypes.POINTER(P)], ctypes.c_int),
        "dw_array_close": ([P], ctypes.c_int),
        "dw_array_info_get": ([P, ctypes.POINTER(Info)], ctypes.c_int),
        "dw_array_gather": ([P, P, i32, i32, u64, P, ctypes.c_size_t], ctypes.c_int),
        "dw_array_scatter": ([P, P, i32, i32, u64, P, ctypes.c_size_t], ctypes.c_int),
        "dw_array_check": ([P, ctypes.c_size_t], ctypes.c_int),
        "dw_array_flush": ([P], ctypes.c_int),
        "dw_array_clear": ([P], ctypes.c_int),
        "dw_array_stats_get": ([P, ctypes.POINTER(Stats)], ctypes.c_int),
        "dw_array_stats_reset": ([P], ctypes.c_int),
        "dw_uring_read_rows": ([ctypes.c_char_p, i32, u64, u32, P, u64, u32, u32, P,
                                ctypes.POINTER(ctypes.c_double)], ctypes.c_int),
    }
    bind(lib, sig)
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


class Handle:
    """What every C ABI handle's owner shares: close() (once; later calls do nothing), use as a context
    manager, and a close when it is collected. A subclass sets ``_h`` (None once closed), names its
    ``dw_*_close`` in ``_close_name``, and says what it is in ``_what()`` for the closed-handle error."""
    _h = None
    _close_name = ""

    def _what(self) -> str:
        return "the handle"

    def close(self) -> None:
        if self._h is not None:
            h, self._h = self._h, None
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
