// The host link's ceiling, measured: what cudaMemcpy moves between pinned
// host memory and the GPU on this machine. Reads that cross the link are
// judged against it (the `deepwell graph --baselines` floor, and every GPU
// benchmark, which measures it in its own run). Host code in a CUDA build
// (links the CUDA runtime); takes about a second and 1 GiB of pinned host
// memory and 1 GiB of device memory while it runs.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "deepwell/common/error.hpp"
#include "deepwell/link/gpu_client.hpp"  // check_cuda

namespace deepwell {

// cudaMemcpy of 1 GiB between pinned host memory and the GPU, best of five,
// in GB/s (host-to-device by default).
inline double measure_memcpy_gbps(cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  const size_t bytes = 1ull << 30;
  void *h, *d;
  check_cuda(cudaMallocHost(&h, bytes), "cudaMallocHost");
  check_cuda(cudaMalloc(&d, bytes), "cudaMalloc");
  std::memset(h, 1, bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  void* dst = kind == cudaMemcpyHostToDevice ? d : h;
  void* src = kind == cudaMemcpyHostToDevice ? h : d;
  cudaMemcpy(dst, src, bytes, kind);
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a);
    cudaMemcpy(dst, src, bytes, kind);
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
inline double measure_h2d_gbps() { return measure_memcpy_gbps(cudaMemcpyHostToDevice); }
inline double measure_d2h_gbps() { return measure_memcpy_gbps(cudaMemcpyDeviceToHost); }

}  // namespace deepwell
