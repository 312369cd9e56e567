// The page cache's host owner and the array<T> that views a dataset through
// it. The cache owns its slots and metadata (device memory for GPU clients,
// host memory for CPU clients), its own queue pairs on the controller, and
// hands kernels a cache_ref (inside array_ref) by value.
//
// Lifetimes: the controller outlives every cache made on it; a cache
// outlives the kernels (or CPU threads) that use its refs. flush(), clear(),
// stats() and the destructor must not run while a kernel uses the cache
// (dump() may: it is for watchdogs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/array.hpp"
#include "deepwell/cache.hpp"
#include "deepwell/controller.hpp"
#include "deepwell/error.hpp"
#include "deepwell/host_client.hpp"

namespace deepwell {

struct cache_config {
  uint32_t page_size = 4096;              // 512 B to 64 KiB, a power of two, >= every dataset's block size
  uint64_t capacity_bytes = 256ull << 20;  // page data; metadata comes on top (about 80 bytes a page)
  uint32_t queue_pairs = 0;               // 0: 64 for a GPU cache, 4 for a CPU cache
  uint32_t queue_entries = 512;           // per queue pair (a power of two)
  uint64_t timeout_ns = 30ull * 1000000000ull;  // deadline of every wait inside an access
  bool direct = true;                     // read datasets held in host memory directly (no controller round trip)
  // Read-only file datasets through a registered read-only mapping of the
  // file: never; when every page is in the page cache at add_dataset
  // (resident); or always (registration then reads and pins the whole file).
  enum class file_tier { never, resident, always } direct_files = file_tier::resident;
  uint32_t max_datasets = 64;
  // The cleaner writes dirty pages back ahead of the CLOCK hand while more
  // than this share of the slots is dirty (0: never), so that most victims
  // are clean when the hand reaches them.
  double clean_threshold = 1.0 / 16;
};

// Pages one warp may pin at once (one per lane).
constexpr uint32_t pages_per_warp = 32;

class page_cache {
 public:
  virtual ~page_cache();
  page_cache(const page_cache&) = delete;
  page_cache& operator=(const page_cache&) = delete;

  // Serves namespace `nsid` through this cache; returns its dataset id,
  // the same id for every call with the same namespace (so that a page of
  // the namespace lives in one slot whichever arrays view it).
  // Throws deepwell::error if the namespace's block size exceeds the page
  // size or the cache has no room for another dataset.
  uint32_t add_dataset(uint32_t nsid);
  const dataset_desc& dataset(uint32_t id) const;

  const cache_config& config() const { return cfg_; }
  controller& owner() const { return ctl_; }
  const cache_ref& ref() const { return ref_; }
  uint32_t slots() const { return ref_.nslots; }
  uint32_t page_size() const { return ref_.page_size; }
  bool on_gpu() const { return gpu_; }

  // Throws, naming both numbers, unless `resident_warps` warps can each pin
  // pages_per_warp pages at once (the condition for forward progress).
  void check_capacity(uint64_t resident_warps) const;

  // Writes every dirty page back, then flushes each writable dataset's
  // namespace (durable). Returns the first error; failed pages stay dirty.
  virtual request_status flush() = 0;
  // Writes back (as flush) and empties the cache.
  virtual request_status clear() = 0;
  virtual cache_stats stats() const = 0;
  virtual void reset_stats() = 0;
  // The first error any access met since the last clear_error().
  virtual request_status last_error() const = 0;
  virtual void clear_error() = 0;
  // Counters, slot states and queue state, for watchdogs and bug reports.
  virtual std::string dump() const;

 protected:
  page_cache(controller& ctl, const cache_config& cfg, bool gpu);
  // Lays out metadata in `meta` (as the clients see it) and page data in
  // `data`; `queues` are the clients' views of the cache's queue pairs.
  void build_ref(uint8_t* meta, uint8_t* data, const std::vector<queue_ref>& queues);
  // Host image of metadata (initial state), written to the cache's memory by the backend.
  std::vector<uint8_t> initial_metadata(const std::vector<queue_ref>& queues) const;
  virtual void write_dataset(uint32_t id, const dataset_desc& d) = 0;
  // Host memory as this cache's clients address it (registered and mapped
  // for a GPU), or nullptr if it cannot be used.
  virtual const uint8_t* direct_pointer(void* host, uint64_t bytes, bool read_only) = 0;
  // The direct tier of namespace nsid, if any.
  const uint8_t* direct_source(uint32_t nsid, const namespace_info& info);
  // NVMe Flush of every writable dataset through the control queue.
  request_status flush_namespaces();

  controller& ctl_;
  cache_config cfg_;
  bool gpu_;
  cache_geometry geo_{};
  cache_meta_layout layout_{};
  cache_ref ref_{};
  std::vector<dataset_desc> datasets_;
  std::vector<std::shared_ptr<host_mapping>> mappings_;  // file mappings the direct tier reads (outlive registrations)
  std::unique_ptr<host_queue_client> control_;  // flushes and identify from the host
};

// A CPU-side cache: slots in host memory, CPU threads as clients.
std::shared_ptr<page_cache> make_host_page_cache(controller& ctl, const cache_config& cfg = {});
// A GPU cache: slots in device memory, GPU threads as clients (deepwell_cuda;
// declared here, defined in src/cuda/gpu_page_cache.cu).
std::shared_ptr<page_cache> make_gpu_page_cache(controller& ctl, const cache_config& cfg = {});

// A dataset as an array of T. Kernels take ref() by value.
template <class T>
class array {
 public:
  array(std::shared_ptr<page_cache> cache, uint32_t nsid) : cache_(std::move(cache)) {
    if (!cache_) throw error("array: no cache");
    if (cache_->page_size() % sizeof(T) != 0)
      throw error("array: element size " + std::to_string(sizeof(T)) + " bytes does not divide the page size " +
                  std::to_string(cache_->page_size()) + " (elements may not straddle pages)");
    const uint32_t id = cache_->add_dataset(nsid);
    const dataset_desc& d = cache_->dataset(id);
    if (d.bytes % sizeof(T) != 0)
      throw error("array: dataset of namespace " + std::to_string(nsid) + " has " + std::to_string(d.bytes) +
                  " bytes, not a multiple of the element size " + std::to_string(sizeof(T)));
    ref_.cache = cache_->ref();
    ref_.dataset = id;
    ref_.n = d.bytes / sizeof(T);
    ref_.read_only = d.read_only != 0;
  }
  const array_ref<T>& ref() const { return ref_; }
  uint64_t size() const { return ref_.n; }
  page_cache& cache() const { return *cache_; }
  request_status flush() { return cache_->flush(); }

 private:
  std::shared_ptr<page_cache> cache_;
  array_ref<T> ref_{};
};

}  // namespace deepwell
