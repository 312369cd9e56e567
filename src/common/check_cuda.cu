#include <cuda_runtime.h>

#include <string>

#include "deepwell/common/error.hpp"

namespace deepwell {

void check_cuda(int e, const char* what) {
  if (e != cudaSuccess)
    throw error(std::string(what) + ": " + cudaGetErrorName(cudaError_t(e)) + " (" +
                cudaGetErrorString(cudaError_t(e)) + ")");
}

}  // namespace deepwell
