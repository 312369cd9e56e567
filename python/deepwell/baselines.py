"""What users would pick instead of deepwell, for the benchmarks and tests:
a numpy.memmap loader (GIDS' mmap baseline) and a plain io_uring read of the
same rows (the storage ceiling)."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from . import _lib


class MemmapLoader:
    """Rows of an N x D file through numpy.memmap: index on the CPU, copy to the GPU."""

    def __init__(self, path, dtype, shape, offset: int = 0):
        self.mm = np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=tuple(shape))

    def warm(self, chunk_rows: int = 1 << 16) -> None:
        """Touches every page, so that pages and page tables are resident."""
        for b in range(0, self.mm.shape[0], chunk_rows):
            np.asarray(self.mm[b:b + chunk_rows]).sum()

    def gather(self, idx, device="cuda"):
        import torch
        cpu_idx = idx.cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
        rows = torch.from_numpy(self.mm[cpu_idx])
        return rows.to(device) if device != "cpu" else rows


def drop_from_page_cache(path) -> None:
    """Asks the kernel to drop the file's clean pages (no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def uring_read_rows(path, rows, row_bytes: int, *, offset: int = 0, odirect: bool = False, depth: int = 64,
                    threads: int = 4, out=None) -> float:
    """Reads rows (int64, host) with plain io_uring; returns seconds. out: None or a host array of the rows."""
    r = np.ascontiguousarray(np.asarray(rows, dtype=np.int64))
    optr = None
    if out is not None:
        if out.nbytes != r.size * row_bytes or not out.flags.c_contiguous:
            raise _lib.InvalidArgument(f"out must be a contiguous host array of {r.size} rows of {row_bytes} bytes")
        optr = out.ctypes.data
    secs = ctypes.c_double()
    _lib.check(_lib.lib.dw_uring_read_rows(os.fsencode(path), int(odirect), offset, row_bytes, r.ctypes.data,
                                           r.size, depth, threads, optr, ctypes.byref(secs)))
    return secs.value
