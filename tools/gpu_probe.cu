// no_gpu_reason (gpu_probe.hpp) where CUDA is built in: cudaGetDeviceCount is
// the cheapest call that fails the way the run would (no driver, a driver
// older than the runtime, no device, devices hidden by
// CUDA_VISIBLE_DEVICES), and it creates no context.
#include <cuda_runtime.h>

#include <chrono>
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

gpu_warmup::gpu_warmup(bool spin) {
  thread_ = std::thread([this, spin] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string why = no_gpu_reason();
    probe_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    probe_.set_value(why);
    if (why.empty()) {
      // Flags first: they are the context's only until it exists.
      if (cudaSetDeviceFlags(spin ? cudaDeviceScheduleSpin : cudaDeviceScheduleBlockingSync) != cudaSuccess)
        (void)cudaGetLastError();
      if (cudaFree(nullptr) != cudaSuccess) (void)cudaGetLastError();  // the context; a failure shows again later
    }
    made_.set_value(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace deepwell::tools

namespace deepwell::tools {

std::string cuda_build_info() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         " runtime";
}

}  // namespace deepwell::tools
