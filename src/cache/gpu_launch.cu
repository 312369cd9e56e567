// Launch-time checks of a kernel's arguments (deepwell/cache/gpu_launch.hpp).
#include <cuda_runtime.h>

#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell {

void check_device_pointer(const void* p, int device, const char* what, const char* owner) {
  if (!p) throw error(std::string(what) + " is a null pointer");
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != device)
        throw error(std::string(what) + " is memory of CUDA device " + std::to_string(a.device) + ", but " + owner +
                    " is on device " + std::to_string(device));
      return;
    case cudaMemoryTypeManaged:
      return;
    case cudaMemoryTypeHost:
      if (a.devicePointer) return;  // pinned and mapped: kernels may use it
      [[fallthrough]];
    default:
      throw error(std::string(what) + " is host memory the GPU cannot address; pass GPU memory (a CUDA tensor)");
  }
}

}  // namespace deepwell
