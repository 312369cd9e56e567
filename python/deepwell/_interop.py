"""Zero-copy views of other libraries' arrays: PyTorch tensors, CuPy and
anything with ``__cuda_array_interface__``, DLPack producers (JAX, ...), and
NumPy arrays. deepwell only needs a pointer, a shape, an element size and
where the memory lives; it never copies (except host index arrays for a GPU
array, which the C side copies on the stream).
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class View:
    ptr: int
    shape: tuple
    itemsize: int
    kind: str          # numpy kind letter of the element type: 'i', 'u', 'f', 'b', 'V' (bfloat16 and others)
    cuda: bool         # device memory (or memory kernels can address)
    device: int        # CUDA ordinal, -1 for host memory
    contiguous: bool
    framework: str     # 'torch', 'cupy', 'numpy', 'cai', 'dlpack'
    owner: Any         # keeps the memory alive while the view is used

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for s in self.shape:
            n *= s
        return n


def _torch():
    return sys.modules.get("torch")


def _cupy():
    return sys.modules.get("cupy")


_TORCH_KIND = {}


def _torch_view(t) -> View:
    torch = _torch()
    if not _TORCH_KIND:
        for dt, k in ((torch.int32, "i"), (torch.int64, "i"), (torch.int16, "i"), (torch.int8, "i"),
                      (torch.uint8, "u"), (torch.float16, "f"), (torch.float32, "f"), (torch.float64, "f"),
                      (torch.bfloat16, "V"), (torch.bool, "b")):
            _TORCH_KIND[dt] = k
    cuda = t.is_cuda
    return View(t.data_ptr(), tuple(t.shape), t.element_size(), _TORCH_KIND.get(t.dtype, "V"), cuda,
                t.device.index if cuda else -1, t.is_contiguous(), "torch", t)


def _contiguous(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _cai_view(obj, framework: str) -> View:
    cai = obj.__cuda_array_interface__
    dt = np.dtype(cai["typestr"]) if cai["typestr"] not in ("<V2",) else np.dtype("V2")
    shape = tuple(cai["shape"])
    ptr = cai["data"][0] or 0
    # The device of other producers' pointers is checked on the C side.
    cp = _cupy()
    device = obj.device.id if framework == "cupy" and cp is not None else 0
    return View(ptr, shape, dt.itemsize, dt.kind, True, device,
                _contiguous(shape, cai.get("strides"), dt.itemsize), framework, obj)


# ---- DLPack (import only): the C structs of dlpack.h ----
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_KIND = {0: "i", 1: "u", 2: "f", 4: "V", 6: "b"}  # kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_view(obj) -> View:
    try:
        capsule = obj.__dlpack__(stream=None)
    except TypeError:
        capsule = obj.__dlpack__()
    # DLManagedTensor starts with its DLTensor; the capsule (unconsumed) frees it when collected.
    t = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    itemsize = t.dtype.bits * t.dtype.lanes // 8
    strides = None if not t.strides else tuple(t.strides[i] * itemsize for i in range(t.ndim))
    dev = t.device.device_type
    cuda = dev in (_DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED)
    return View((t.data or 0) + t.byte_offset, shape, itemsize, _DL_KIND.get(t.dtype.code, "V"), cuda,
                t.device.device_id if dev == _DL_CUDA else (0 if cuda else -1),
                _contiguous(shape, strides, itemsize), "dlpack", (obj, capsule))


def view(obj) -> View:
    """A View of any supported array (raises TypeError otherwise)."""
    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_view(obj)
    if isinstance(obj, np.ndarray):
        return View(obj.__array_interface__["data"][0], obj.shape, obj.itemsize, obj.dtype.kind, False, -1,
                    obj.flags.c_contiguous, "numpy", obj)
    if hasattr(obj, "__cuda_array_interface__"):
        cp = _cupy()
        return _cai_view(obj, "cupy" if cp is not None and isinstance(obj, cp.ndarray) else "cai")
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj)
    raise TypeError(f"deepwell cannot read a {type(obj).__name__}: pass a PyTorch tensor, a CuPy or NumPy "
                    "array, or an object with __cuda_array_interface__ or __dlpack__")


def current_stream(v: View | None, device: int) -> int:
    """The stream work on v's framework is ordered on (0: the legacy default stream)."""
    if v is not None and v.framework == "torch" and v.cuda:
        return _torch().cuda.current_stream(v.device).cuda_stream
    if v is not None and v.framework == "cupy":
        return _cupy().cuda.get_current_stream().ptr
    return 0


def stream_handle(stream) -> int:
    """An integer cudaStream_t from an int, a torch.cuda.Stream or a cupy Stream."""
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise TypeError(f"not a CUDA stream: {stream!r} (pass an int, torch.cuda.Stream or cupy.cuda.Stream)")
