// cuda_shim.hpp with CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "deepwell/vectors/gpu_search.hpp"
#include "deepwell/views/gpu_rows.hpp"
#include "cuda_shim.hpp"

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

device_guard on_device(int device) {
  if (device < 0) return nullptr;
  int previous = -1;
  check_cuda(cudaGetDevice(&previous), "cudaGetDevice");
  if (previous != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  return device_guard(new previous_device{previous});
}
void put_back_device::operator()(previous_device* p) const {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != p->id && p->id >= 0) cudaSetDevice(p->id);
  delete p;
}

std::shared_ptr<page_cache> gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg) {
  return make_gpu_page_cache(std::move(link), cfg);
}

std::shared_ptr<vectors::gpu_search> gpu_vector_search(const vectors::vector_index& index) {
  return std::make_shared<vectors::gpu_search>(index);
}
vectors::search_counts gpu_vector_search_run(vectors::gpu_search& s, const float* queries, uint64_t nq,
                                             const vectors::search_options& o, uint32_t* ids, float* distances,
                                             bool on_device) {
  return on_device ? s.search_device(queries, nq, o, ids, distances) : s.search(queries, nq, o, ids, distances);
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
  check_device_pointer(p, device, what, "the array");
}

unsigned* gpu_gate_alloc() {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, sizeof(unsigned)), "cudaMalloc of the row gate");
  check_cuda(cudaMemset(p, 0, sizeof(unsigned)), "cudaMemset of the row gate");
  return static_cast<unsigned*>(p);
}
void gpu_gate_free(unsigned* gate) {
  if (gate) cudaFree(gate);
}

void gpu_rows(const page_cache& cache, const rows_ref& r, unsigned* gate, bool scatter, const void* idx,
              int idx_bits, bool idx_on_host, uint64_t n, void* mem, uintptr_t stream_handle) {
  if (n == 0) return;
  auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  const index_type t = idx_bits == 32 ? index_type::i32 : index_type::i64;
  void* staged = nullptr;
  if (idx_on_host) {
    const size_t bytes = n * (idx_bits / 8);
    check_cuda(cudaMallocAsync(&staged, bytes, stream), "cudaMallocAsync of the index copy");
    check_cuda(cudaMemcpyAsync(staged, idx, bytes, cudaMemcpyHostToDevice, stream), "copying the indices to the GPU");
    idx = staged;
  }
  try {
    if (scatter)
      scatter_rows_async(cache, r, idx, t, n, mem, stream, row_gate{gate});
    else
      gather_rows_async(cache, r, idx, t, n, mem, stream, row_gate{gate});
  } catch (...) {
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
