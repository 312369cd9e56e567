// The C ABI's CUDA shim: what it needs from CUDA (devices, pointer checks,
// the row kernels, synchronization), behind plain functions: defined in
// cuda_shim.cu where CUDA is built, and in cuda_shim_none.cpp (each throwing
// no_cuda) where it is not. Keeps c_api.cpp a host-compiler file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/vectors/index.hpp"
#include "deepwell/views/rows.hpp"

namespace deepwell::vectors {
class gpu_search;
}

namespace deepwell::capi {

// No CUDA driver, no device, or a build without CUDA.
struct no_cuda : error {
  using error::error;
};

// Device count; throws no_cuda naming the reason when there is none.
int gpu_device_count();
// The device current before a device_guard, put back when the guard ends.
struct previous_device {
  int id;
};
struct put_back_device {
  void operator()(previous_device* p) const;
};
// Keeps a device current for the calling thread until it ends.
using device_guard = std::unique_ptr<previous_device, put_back_device>;
// Makes `device` current; an empty guard (nothing to do) for a host cache, device -1.
device_guard on_device(int device);
// A service's GPU part (`make`, on `device`), or no_cuda naming `what` in
// a library built without CUDA (the maker is declared everywhere and
// defined only in the GPU build: uncalled here, never linked).
template <class Make>
auto gpu_part(int device, const char* what, Make&& make) -> decltype(make()) {
#if defined(DEEPWELL_C_CUDA)
  (void)what;
  const device_guard g = on_device(device);
  return make();
#else
  (void)device;
  (void)make;
  throw no_cuda(std::string("this libdeepwell_c.so was built without GPU ") + what + " (DEEPWELL_C_CUDA): use device -1");
#endif
}
std::shared_ptr<page_cache> gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg);
// A handle's cache: in the GPU memory of `device` (made current while the
// cache is made), or in host memory for CPU clients (device -1).
inline std::shared_ptr<page_cache> cache_on(int device, std::shared_ptr<controller_link> link, const cache_config& cfg) {
  if (device < 0) return make_host_page_cache(std::move(link), cfg);
  const device_guard g = on_device(device);
  return gpu_cache(std::move(link), cfg);
}
// A vector index's GPU search (on the index's GPU cache, its device current).
std::shared_ptr<vectors::gpu_search> gpu_vector_search(const vectors::vector_index& index);
// gpu_search's search (host memory) or search_device (on_device).
vectors::search_counts gpu_vector_search_run(vectors::gpu_search& s, const float* queries, uint64_t nq,
                                             const vectors::search_options& o, uint32_t* ids, float* distances,
                                             bool on_device);
// A row_report the GPU writes and the host reads (mapped pinned memory).
row_report* gpu_report_alloc();
void gpu_report_free(row_report* r);
// Throws, naming `what`, unless p is memory a kernel on `device` may use.
void gpu_check_pointer(const void* p, int device, const char* what);
// A zeroed device counter shared by the row kernels of one array (their
// gate: launches on several streams share the cache's warp budget).
unsigned* gpu_gate_alloc();
void gpu_gate_free(unsigned* gate);
// Gathers (scatter = false) or scatters rows on `stream`; idx_on_host: idx
// is host memory, copied to the device on the stream first.
void gpu_rows(const page_cache& cache, const rows_ref& r, unsigned* gate, bool scatter, const void* idx,
              int idx_bits, bool idx_on_host, uint64_t n, void* mem, uintptr_t stream);
// Throws with the CUDA error, if any, after waiting.
void gpu_sync_stream(uintptr_t stream);
void gpu_sync_device();

}  // namespace deepwell::capi
