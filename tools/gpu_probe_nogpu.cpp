// no_gpu_reason (gpu_probe.hpp) in a build without CUDA: never a GPU.
#include "gpu_probe.hpp"

namespace deepwell::tools {

std::string no_gpu_reason() { return "this deepwell was built without CUDA; rebuild with nvcc to use a GPU"; }

gpu_warmup::gpu_warmup(bool) {
  probe_.set_value(no_gpu_reason());
  made_.set_value(0.0);
}

}  // namespace deepwell::tools

namespace deepwell::tools {

std::string cuda_build_info() { return "without CUDA: CPU threads only"; }

}  // namespace deepwell::tools
