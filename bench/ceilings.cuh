// Ceilings every GPU benchmark measures in its own run.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "deepwell/gpu_client.hpp"

namespace deepwell::bench {

// The host link: cudaMemcpy host-to-device of 1 GiB from pinned memory, best
// of five, in GB/s.
inline double h2d_gbps() {
  const size_t bytes = 1ull << 30;
  void *h, *d;
  check_cuda(cudaMallocHost(&h, bytes), "cudaMallocHost");
  check_cuda(cudaMalloc(&d, bytes), "cudaMalloc");
  std::memset(h, 1, bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a);
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFreeHost(h);
  cudaFree(d);
  return bytes / (best * 1e-3) / 1e9;
}

}  // namespace deepwell::bench
