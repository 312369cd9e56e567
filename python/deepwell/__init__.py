"""deepwell: GPU (and CPU) threads reading and writing storage-sized datasets
through a page cache in GPU memory, served by a user-space controller.

    import deepwell, torch
    feats = deepwell.open("feats.f32", dtype="float32", shape=(-1, 1024), cache_size="4GiB")
    rows = feats[torch.tensor([3, 1, 4], device="cuda")]   # a (3, 1024) CUDA tensor

See docs/python.md.
"""
from ._lib import (CudaUnavailable, Error, IndexOutOfRange, InvalidArgument,  # noqa: F401
                   IOFailure)
from .array import Array, cuda_available, open, parse_bytes  # noqa: F401
from . import checkpoint, kv, vectors  # noqa: F401,E402  (deepwell.checkpoint.save/load, deepwell.kv.create/open, deepwell.vectors)
from ._server import Server, connect, disconnect  # noqa: F401,E402  (server mode: docs/server.md)

__version__ = "0.1.0"
__all__ = ["Array", "open", "cuda_available", "parse_bytes", "Error", "InvalidArgument", "IOFailure",
           "IndexOutOfRange", "CudaUnavailable", "checkpoint", "kv", "vectors", "connect", "disconnect", "Server"]
