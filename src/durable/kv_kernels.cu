// The key-value store's GPU support (kv_executor, durable/kv_store.hpp): a
// batch's phases as kernels over a GPU page cache (full warps, a key per
// lane; never more warps than the cache lets pin 32 pages each at once),
// device memory for the store's scratch, and the copies between it and host
// memory. Every call waits for its work (the store's calls are synchronous).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/durable/kv_store.hpp"

namespace deepwell::durable {
namespace {

constexpr int block_threads = 256;
constexpr uint32_t warps_per_block = block_threads / 32;

__global__ void dedup_kernel(kv_detail::batch b) {
  const uint64_t threads = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < b.n; i += threads) kv_detail::dedup_op(b, i);
}

// The plan-and-log and get phases (a kernel each): warps stride over
// groups of 32 ops; control flow is warp-uniform at every collective, so
// the warp is the full warp.
template <kv_phase Phase>
__global__ void __launch_bounds__(block_threads) warp_ops_kernel(kv_detail::batch b) {
  static_assert(Phase == kv_phase::plan_and_log || Phase == kv_phase::get);
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const gpu_full_warp w;
  for (uint64_t base = warp * 32; base < b.n; base += warps * 32) {
    const uint64_t i = base + (threadIdx.x & 31);
    if constexpr (Phase == kv_phase::plan_and_log)
      kv_detail::plan_and_log(w, b, i, i < b.n);
    else
      kv_detail::get_ops(w, b, i, i < b.n);
  }
}

__global__ void commit_kernel(kv_detail::batch b, uint32_t rows, uint64_t entries) {
  kv_detail::commit(gpu_full_warp{}, b, rows, entries);
}

template <class Kernel>
uint64_t resident_blocks(Kernel kernel) {
  return std::max<uint64_t>(1, resident_warps(kernel, ~0u >> 1, block_threads) / warps_per_block);
}

class gpu_support final : public kv_executor {
 public:
  gpu_support() {
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~gpu_support() override { cudaStreamDestroy(stream_); }

  uint32_t lanes() const override { return 32; }
  void* alloc(uint64_t bytes) override {
    void* p = nullptr;
    const std::string what = "cudaMalloc of the kv store's scratch (" + std::to_string(bytes) + " bytes)";
    check_cuda(cudaMalloc(&p, bytes), what.c_str());
    return p;
  }
  void free(void* p) override {
    if (p) cudaFree(p);
  }
  void zero(void* p, uint64_t bytes) override {
    check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemset");
    sync("cudaMemset");
  }
  void to_device(void* dst, const void* src, uint64_t bytes) override { copy(dst, src, bytes, cudaMemcpyHostToDevice); }
  void to_host(void* dst, const void* src, uint64_t bytes) override { copy(dst, src, bytes, cudaMemcpyDeviceToHost); }
  void device_copy(void* dst, const void* src, uint64_t bytes) override {
    copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  }

  void check_device_pointer(const void* p, const char* what) override {
    deepwell::check_device_pointer(p, device_, what, "the kv store's cache");
  }

  void run(const page_cache& cache, kv_phase phase, const kv_detail::batch& b, uint32_t rows,
           uint64_t entries) override {
    if (!cache.on_gpu()) throw error("kv store: GPU support with a host page cache");
    switch (phase) {
      case kv_phase::dedup: {
        const uint64_t blocks = std::clamp<uint64_t>((b.n + block_threads - 1) / block_threads, 1, 1u << 16);
        dedup_kernel<<<unsigned(blocks), block_threads, 0, stream_>>>(b);
        break;
      }
      case kv_phase::plan_and_log:
        launch_warps(cache, warp_ops_kernel<kv_phase::plan_and_log>, b);
        break;
      case kv_phase::get:
        launch_warps(cache, warp_ops_kernel<kv_phase::get>, b);
        break;
      case kv_phase::commit:
        cache.check_capacity(1);
        commit_kernel<<<1, 32, 0, stream_>>>(b, rows, entries);
        break;
    }
    check_cuda(cudaGetLastError(), "launching a kv store kernel");
    sync("a kv store kernel");
  }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;

  void sync(const char* what) { check_cuda(cudaStreamSynchronize(stream_), what); }
  void copy(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpy");
    sync("cudaMemcpy");
  }

  // As many warps as the work has groups of 32 ops, at most as many as the
  // GPU holds at once and the cache lets pin 32 pages each.
  template <class Kernel>
  void launch_warps(const page_cache& cache, Kernel kernel, const kv_detail::batch& b) {
    const uint64_t budget = cache.slots() / pages_per_warp / warps_per_block;
    if (budget == 0)
      throw error("kv store: the page cache has " + std::to_string(cache.slots()) + " pages; a batch needs at least " +
                  std::to_string(pages_per_warp * warps_per_block) + " (one block of " +
                  std::to_string(warps_per_block) + " warps, 32 pages each)");
    static const uint64_t resident = resident_blocks(kernel);
    const uint64_t cap = std::max<uint64_t>(1, std::min(budget, resident));
    const uint64_t blocks = std::clamp<uint64_t>((b.n + block_threads - 1) / block_threads, 1, cap);
    check_launch(cache, kernel, blocks, block_threads);
    kernel<<<unsigned(blocks), block_threads, 0, stream_>>>(b);
  }
};

}  // namespace

std::shared_ptr<kv_executor> gpu_kv_support() { return std::make_shared<gpu_support>(); }

}  // namespace deepwell::durable
