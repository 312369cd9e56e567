// no_gpu_reason (gpu_probe.hpp) where CUDA is built in: cudaGetDeviceCount is
// the cheapest call that fails the way the run would (no driver, a driver
// older than the runtime, no device, devices hidden by
// CUDA_VISIBLE_DEVICES), and it creates no context.
#include <cuda_runtime.h>

#include <string>

#include "gpu_probe.hpp"

namespace deepwell::tools {

std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the caller may go on without the GPU
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }
  if (count == 0) return "cudaGetDeviceCount: no CUDA device";
  return "";
}

}  // namespace deepwell::tools

namespace deepwell::tools {

std::string cuda_build_info() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         " runtime";
}

}  // namespace deepwell::tools
