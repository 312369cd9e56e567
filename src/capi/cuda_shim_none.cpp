// cuda_shim.hpp in a build without CUDA: every GPU entry says so.
#include "cuda_shim.hpp"

namespace deepwell::capi {

namespace {
[[noreturn]] void none() { throw no_cuda("this deepwell was built without CUDA (CPU clients only: device=\"cpu\")"); }
}  // namespace

int gpu_device_count() { none(); }
device_guard on_device(int device) {
  if (device >= 0) none();
  return nullptr;
}
void put_back_device::operator()(previous_device* p) const { delete p; }
std::shared_ptr<page_cache> gpu_cache(std::shared_ptr<controller_link>, const cache_config&) { none(); }
std::shared_ptr<vectors::gpu_search> gpu_vector_search(const vectors::vector_index&) { none(); }
vectors::search_counts gpu_vector_search_run(vectors::gpu_search&, const float*, uint64_t, const vectors::search_options&,
                                             uint32_t*, float*, bool) {
  none();
}
row_report* gpu_report_alloc() { none(); }
void gpu_report_free(row_report*) {}
void gpu_check_pointer(const void*, int, const char*) { none(); }
unsigned* gpu_gate_alloc() { none(); }
void gpu_gate_free(unsigned*) {}
void gpu_rows(const page_cache&, const rows_ref&, unsigned*, bool, const void*, int, bool, uint64_t, void*, uintptr_t) {
  none();
}
void gpu_sync_stream(uintptr_t) { none(); }
void gpu_sync_device() { none(); }

}  // namespace deepwell::capi
