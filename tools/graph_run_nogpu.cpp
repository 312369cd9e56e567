// Built without CUDA: the GPU runner says so.
#include "deepwell/common/error.hpp"
#include "graph_options.hpp"

namespace deepwell::tools {
int run_graph_gpu(const graph_run_options&) {
  throw error("this deepwell was built without CUDA: run with --cpu, or rebuild with nvcc available");
}
}  // namespace deepwell::tools
