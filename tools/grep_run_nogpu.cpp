// Built without CUDA: the GPU grep says so.
#include "deepwell/common/error.hpp"
#include "grep/grep_run.hpp"

namespace deepwell {
grep_report run_grep_gpu(const grep_options&, const grep_dictionary&, const std::vector<std::string>&) {
  throw error("this deepwell was built without CUDA: run grep with --cpu, or rebuild with nvcc available");
}
}  // namespace deepwell
