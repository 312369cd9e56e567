// The GPU backend of the page cache: slots and metadata in device memory,
// GPU queue clients (queue pairs pinned and mapped), the direct tier's host
// memory registered and mapped, and kernels for flush and clear. Host-side
// reads of counters go through a non-blocking stream, so dump() works while
// a kernel that uses the cache is still running.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cache/sorted_flush.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/link/gpu_client.hpp"

namespace deepwell {

namespace {

// Host memory registered for the direct tier, counted per address: caches
// on the same dataset share one registration, and the last one out
// unregisters it.
std::mutex registrations_mutex;
std::map<void*, unsigned> registrations;

bool register_shared(void* p, uint64_t bytes, bool read_only) {
  std::lock_guard<std::mutex> lock(registrations_mutex);
  auto it = registrations.find(p);
  if (it != registrations.end()) {
    ++it->second;
    return true;
  }
  // A PROT_READ file mapping can only be registered read-only.
  const unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0);
  if (cudaHostRegister(p, bytes, flags) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. registered by someone else: then we do not own it
    return false;
  }
  registrations[p] = 1;
  return true;
}

void unregister_shared(void* p) {
  std::lock_guard<std::mutex> lock(registrations_mutex);
  auto it = registrations.find(p);
  if (it == registrations.end() || --it->second) return;
  cudaHostUnregister(p);
  registrations.erase(it);
}

// Each warp writes back 32 slots at a time, copying the pages together
// (page_cache_ref::flush_warp).
__global__ void flush_slots(page_cache_ref c, uint32_t* first_error) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  for (uint32_t first = warp * 32; first < c.slots(); first += warps * 32) {
    const request_status r = c.flush_warp(gpu_warp{}, first);
    if (!r.ok()) atomicCAS(first_error, 0u, r.pack());
  }
}

// Pages [first, last] of dataset ds made durable: each warp writes back a
// chunk of 32 pages through one queue and joins the group flush
// (page_cache_ref::persist_run).
__global__ void persist_pages(page_cache_ref c, uint32_t ds, uint64_t first, uint64_t last, uint32_t* first_error) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const uint64_t chunks = (last - first) / 32 + 1;
  for (uint64_t k = warp; k < chunks; k += warps) {
    const uint64_t lo = first + k * 32;
    const uint64_t hi = last - lo < 31 ? last : lo + 31;
    const request_status r = c.persist_run(gpu_warp{}, ds, lo, hi);
    if (!r.ok() && (threadIdx.x & 31) == 0) atomicCAS(first_error, 0u, r.pack());
  }
}

__global__ void adopt_orphans(page_cache_ref c) {
  for (uint32_t s = blockIdx.x * blockDim.x + threadIdx.x; s < c.slots(); s += gridDim.x * blockDim.x)
    c.finish_orphan(s);
}

// Empties every clean slot (no kernel may use the cache meanwhile).
__global__ void clear_slots(page_cache_ref c) {
  for (uint32_t s = blockIdx.x * blockDim.x + threadIdx.x; s < c.slots(); s += gridDim.x * blockDim.x)
    c.drop_clean(s);
}

class gpu_page_cache final : public page_cache {
 public:
  gpu_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg)
      : page_cache(std::move(link), cfg, true) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    qp_geometry g{cfg_.queue_entries, cfg_.queue_entries, geo_.page_size};
    std::vector<queue_ref> refs;
    for (uint32_t i = 0; i < cfg_.queue_pairs; ++i) {
      clients_.push_back(std::make_unique<gpu_queue_client>(link_->open_queue_pair(g)));
      refs.push_back(clients_.back()->ref());
    }
    const uint64_t data_bytes = uint64_t(geo_.slots) * geo_.page_size;
    check_cuda(cudaMalloc(&meta_, layout_.total), "cudaMalloc of the page cache's metadata");
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&data_), data_bytes);
    if (e != cudaSuccess)
      throw error("page cache: cannot allocate " + std::to_string(data_bytes) + " bytes of GPU memory for " +
                  std::to_string(geo_.slots) + " pages: " + cudaGetErrorString(e));
    const std::vector<uint8_t> img = initial_metadata(refs);
    check_cuda(cudaMemcpy(meta_, img.data(), img.size(), cudaMemcpyHostToDevice), "cudaMemcpy of cache metadata");
    build_ref(static_cast<uint8_t*>(meta_), data_, refs);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&flush_error_), 2 * sizeof(uint32_t)), "cudaMalloc");  // flush, persist
    // Pinned, so that reading counters back is a true async copy on our
    // non-blocking stream and never waits for a running kernel.
    check_cuda(cudaMallocHost(&readback_, sizeof(cache_stats_shard) * cache_stats_shards + 128), "cudaMallocHost");
  }

  ~gpu_page_cache() override {
    cudaStreamSynchronize(stream_);
    for (void* p : registered_) unregister_shared(p);
    cudaFree(flush_error_);
    cudaFreeHost(readback_);
    cudaFree(data_);
    cudaFree(meta_);
    cudaStreamDestroy(stream_);
  }

  request_status flush() override {
    // First in key order (adjacent pages of a file reach a poller together),
    // then every slot in slot order, as a flush always looked: that pass
    // writes what the first left dirty (a failed write is tried again there,
    // and reported if it fails again) or could not take.
    detail::flush_in_key_order(ref_, stream_);
    check_cuda(cudaMemsetAsync(flush_error_, 0, sizeof(uint32_t), stream_), "cudaMemsetAsync");
    const unsigned blocks = (geo_.slots + 255) / 256;
    flush_slots<<<blocks < 4096 ? blocks : 4096, 256, 0, stream_>>>(ref_, flush_error_);
    check_cuda(cudaGetLastError(), "flush kernel launch");
    uint32_t packed = 0;
    check_cuda(cudaMemcpyAsync(&packed, flush_error_, sizeof(packed), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    check_cuda(cudaStreamSynchronize(stream_), "flush kernel");
    const request_status n = flush_namespaces();
    const request_status first = request_status::unpack(packed);
    return first.ok() ? n : first;
  }

  request_status persist(uint32_t id, uint64_t first_page, uint64_t last_page) override {
    const dataset_desc& d = dataset(id);  // throws for an unknown id
    if (d.pages == 0 || first_page > last_page || first_page >= d.pages) return {};
    if (last_page >= d.pages) last_page = d.pages - 1;
    uint32_t* err = flush_error_ + 1;
    check_cuda(cudaMemsetAsync(err, 0, sizeof(uint32_t), stream_), "cudaMemsetAsync");
    const uint64_t warps = (last_page - first_page) / 32 + 1;
    const uint64_t blocks = (warps + 7) / 8;
    persist_pages<<<unsigned(blocks < 1024 ? blocks : 1024), 256, 0, stream_>>>(ref_, id, first_page, last_page, err);
    check_cuda(cudaGetLastError(), "persist kernel launch");
    uint32_t packed = 0;
    check_cuda(cudaMemcpyAsync(&packed, err, sizeof(packed), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    check_cuda(cudaStreamSynchronize(stream_), "persist kernel");
    return request_status::unpack(packed);
  }

  request_status clear() override {
    const unsigned blocks = (geo_.slots + 255) / 256;
    const unsigned grid = blocks < 4096 ? blocks : 4096;
    adopt_orphans<<<grid, 256, 0, stream_>>>(ref_);
    check_cuda(cudaGetLastError(), "orphan kernel launch");
    const request_status r = flush();
    clear_slots<<<grid, 256, 0, stream_>>>(ref_);
    check_cuda(cudaGetLastError(), "clear kernel launch");
    check_cuda(cudaStreamSynchronize(stream_), "clear kernel");
    return r;
  }

  cache_stats stats() const override {
    std::lock_guard<std::mutex> lock(readback_mutex_);
    auto* s = static_cast<cache_stats_shard*>(readback_);
    check_cuda(cudaMemcpyAsync(s, stats_memory(), sizeof(cache_stats_shard) * cache_stats_shards, cudaMemcpyDeviceToHost,
                               stream_),
               "cudaMemcpy of cache statistics");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return sum_stats(s, cache_stats_shards);
  }
  void reset_stats() override {
    check_cuda(cudaMemsetAsync(stats_memory(), 0, sizeof(cache_stats_shard) * cache_stats_shards, stream_), "cudaMemset");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  request_status last_error() const override {
    std::lock_guard<std::mutex> lock(readback_mutex_);
    auto* v = static_cast<uint32_t*>(readback_);
    check_cuda(cudaMemcpyAsync(v, error_memory(), 4, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return request_status::unpack(*v);
  }
  void clear_error() override {
    check_cuda(cudaMemsetAsync(error_memory(), 0, 4, stream_), "cudaMemset");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 protected:
  void write_dataset(uint32_t id, const dataset_desc& d) override {
    check_cuda(cudaMemcpy(reinterpret_cast<uint8_t*>(meta_) + layout_.datasets + id * sizeof(dataset_desc), &d,
                          sizeof(d), cudaMemcpyHostToDevice),
               "cudaMemcpy of a dataset descriptor");
  }

  // The direct tier: host memory (a host-memory namespace, or a read-only
  // file mapping) registered and mapped so that warps read it over the host
  // link with no controller round trip. Falls back to the controller
  // (nullptr) if it cannot be registered.
  const uint8_t* direct_pointer(void* p, uint64_t bytes, bool read_only) override {
    if (register_shared(p, bytes, read_only)) registered_.push_back(p);
    // Not registered by us: usable only if someone else registered it mapped.
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return static_cast<const uint8_t*>(dev);
  }

  void unshare_host(void* p) override {
    for (size_t i = 0; i < registered_.size(); ++i)
      if (registered_[i] == p) {
        registered_.erase(registered_.begin() + i);
        unregister_shared(p);
        return;
      }
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<std::unique_ptr<gpu_queue_client>> clients_;
  std::vector<void*> registered_;
  void* meta_ = nullptr;
  uint8_t* data_ = nullptr;
  uint32_t* flush_error_ = nullptr;
  void* readback_ = nullptr;  // pinned
  mutable std::mutex readback_mutex_;
};

}  // namespace

std::shared_ptr<page_cache> make_gpu_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg) {
  return std::make_shared<gpu_page_cache>(std::move(link), cfg);
}

}  // namespace deepwell
