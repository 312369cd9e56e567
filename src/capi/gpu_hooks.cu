// gpu_hooks.hpp with CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "deepwell/gpu_client.hpp"
#include "deepwell/gpu_rows.hpp"
#include "gpu_hooks.hpp"

namespace deepwell::capi {

int gpu_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw no_cuda(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
  }
  if (n == 0) throw no_cuda("no CUDA device");
  return n;
}

device_guard::device_guard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
}
device_guard::~device_guard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0) cudaSetDevice(previous_);
}

std::shared_ptr<page_cache> gpu_cache(controller& ctl, const cache_config& cfg) {
  return make_gpu_page_cache(ctl, cfg);
}

row_report* gpu_report_alloc() {
  void* p = nullptr;
  check_cuda(cudaHostAlloc(&p, sizeof(row_report), cudaHostAllocMapped | cudaHostAllocPortable),
             "cudaHostAlloc of the row report");
  return new (p) row_report{};
}
void gpu_report_free(row_report* r) {
  if (r) cudaFreeHost(r);
}

void gpu_check_pointer(const void* p, int device, const char* what) {
  if (!p) throw error(std::string(what) + " is a null pointer");
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != device)
        throw error(std::string(what) + " is memory of CUDA device " + std::to_string(a.device) +
                    ", but the array is on device " + std::to_string(device));
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

uint64_t warp_budget::take(uint64_t want) {
  want = std::max<uint64_t>(8, want / 8 * 8);
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return free_ >= 8; });
  const uint64_t got = std::min(want, free_ / 8 * 8);
  free_ -= got;
  return got;
}

void warp_budget::give(uint64_t warps) {
  {
    std::lock_guard<std::mutex> lock(m_);
    free_ += warps;
  }
  cv_.notify_all();
}

uint64_t gpu_row_warps(const page_cache& cache) { return row_warp_budget(cache); }

namespace {
struct budget_return {
  warp_budget* budget;
  uint64_t warps;
};
void CUDART_CB give_back(void* p) {
  auto* r = static_cast<budget_return*>(p);
  r->budget->give(r->warps);
  delete r;
}
}  // namespace

void gpu_rows(const page_cache& cache, const rows_ref& r, warp_budget& budget, bool scatter, const void* idx,
              int idx_bits, bool idx_on_host, uint64_t n, void* mem, uintptr_t stream_handle) {
  if (n == 0) return;
  check_row_capacity(cache);
  auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  const index_type t = idx_bits == 32 ? index_type::i32 : index_type::i64;
  void* staged = nullptr;
  if (idx_on_host) {
    const size_t bytes = n * (idx_bits / 8);
    check_cuda(cudaMallocAsync(&staged, bytes, stream), "cudaMallocAsync of the index copy");
    check_cuda(cudaMemcpyAsync(staged, idx, bytes, cudaMemcpyHostToDevice, stream), "copying the indices to the GPU");
    idx = staged;
  }
  const uint64_t warps = budget.take(n);  // a warp a row at most
  try {
    if (scatter)
      scatter_rows_async(cache, r, idx, t, n, mem, stream, warps);
    else
      gather_rows_async(cache, r, idx, t, n, mem, stream, warps);
    check_cuda(cudaLaunchHostFunc(stream, give_back, new budget_return{&budget, warps}),
               "cudaLaunchHostFunc (returning the warp budget)");
  } catch (...) {
    budget.give(warps);
    if (staged) cudaFreeAsync(staged, stream);
    throw;
  }
  if (staged) check_cuda(cudaFreeAsync(staged, stream), "cudaFreeAsync of the index copy");
}

void gpu_sync_stream(uintptr_t stream) {
  check_cuda(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)), "waiting for the stream");
}
void gpu_sync_device() { check_cuda(cudaDeviceSynchronize(), "waiting for the device"); }

}  // namespace deepwell::capi
