// The page cache's host owner. The cache owns its slots and metadata
// (device memory for GPU clients, host memory for CPU clients) and its own
// queue pairs, which it opens through a controller_link (so the controller
// may be in this process or, with server mode, another), and hands kernels
// a page_cache_ref (inside array_ref, array.hpp) by value.
//
// Lifetimes: a cache keeps its link (and an owning link its controller;
// embedded.hpp makes caches on a controller the caller keeps); a cache
// outlives the kernels (or CPU threads) that use its refs. flush(), clear(),
// stats() and the destructor must not run while a kernel uses the cache
// (dump() may: it is for watchdogs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache_ref.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/host_client.hpp"

namespace deepwell {

// Defaults come from defaults.hpp (the environment's DEEPWELL_* values,
// else the built-in ones); what code sets here wins over both. Users give
// settings as cache_options (cache_options.hpp), applied to one of these.
struct cache_config {
  uint32_t page_size = defaults::page_size();  // 512 B to 64 KiB, a power of two, >= every dataset's block size
  uint64_t capacity_bytes = defaults::cache_bytes();  // page data; metadata comes on top (about 100 bytes a page)
  uint32_t queue_pairs = 0;  // 0: defaults::gpu_queue_pairs() for a GPU cache, cpu_queue_pairs() for a CPU one
  uint32_t queue_entries = defaults::queue_entries();  // per queue pair (a power of two)
  uint64_t timeout_ns = defaults::timeout_ns();        // deadline of every wait inside an access
  // Datasets with a direct tier (host memory; read-only files, as
  // direct_files says) are read straight from host memory, with no
  // controller round trip.
  bool direct_tier = true;
  // Read-only file datasets through a registered read-only mapping of the
  // file: never; when every page is in the page cache at add_dataset
  // (resident); or always (registration then reads and pins the whole file).
  enum class file_tier { never, resident, always } direct_files = file_tier_from(defaults::direct_files());
  uint32_t max_datasets = 64;
  // The cleaner writes dirty pages back ahead of the CLOCK hand while more
  // than this share of the slots is dirty (0: never), so that most victims
  // are clean when the hand reaches them.
  double clean_threshold = defaults::clean_threshold();

  static file_tier file_tier_from(const std::string& name) {
    return name == "never" ? file_tier::never : name == "always" ? file_tier::always : file_tier::resident;
  }
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
  // the namespace lives in one slot whichever arrays view it). The
  // dataset's page source (page_source.hpp) is chosen here, once: the
  // options' explicit one, or (automatic) what the link offers: a host
  // mapping of the dataset where the cache allows a direct tier, else a
  // server's shared tier, else the controller.
  // Throws deepwell::error if the namespace's block size exceeds the page
  // size, the cache has no room for another dataset, or the namespace is
  // served already with another source than the options name.
  struct dataset_options {
    enum class source_t { automatic, link, windows } source = source_t::automatic;
    // windows: the table of window mappings (client memory, one entry per
    // 2^window_shift pages), which its owner sets and clears while no
    // client reads that window's pages through it.
    const window_source* windows = nullptr;
    uint32_t window_shift = 0;
    // Where set: a write-back tally (page_source.hpp), client memory of
    // enough zeroed words for the dataset's pages.
    uint32_t* writeback_counts = nullptr;
    uint32_t writeback_shift = 0;
  };
  uint32_t add_dataset(uint32_t nsid) { return add_dataset(nsid, dataset_options{}); }
  // An owner that asks again with an explicit source of the same kind (a
  // new file system over a namespace this cache served before) replaces
  // the window table and the tally: the previous owner's are gone.
  uint32_t add_dataset(uint32_t nsid, const dataset_options& o);
  const dataset_desc& dataset(uint32_t id) const;
  // How dataset `id`'s misses are filled, in words: its source (a mapping
  // of the file, the dataset's host memory, window mappings, a server's
  // host tier, or the controller's queues: which controller, its I/O
  // backend, the file's buffered or O_DIRECT reads), and why a faster
  // source was not taken. DEEPWELL_LOG=info prints it when the dataset is
  // added.
  const std::string& route(uint32_t id) const;
  // Host memory made readable by this cache's clients (registered and
  // mapped for a GPU; read-only for a PROT_READ file mapping): its address
  // as they see it, or nullptr if it cannot be. Pair with unshare_host.
  const uint8_t* share_host(void* host, uint64_t bytes, bool read_only) {
    return direct_pointer(host, bytes, read_only);
  }
  // Undoes share_host. For a GPU this waits for every running kernel
  // (cudaHostUnregister does): call it when no running kernel waits on the
  // caller, or both wait forever.
  virtual void unshare_host(void* host) = 0;

  const cache_config& config() const { return cfg_; }
  controller_link& link() const { return *link_; }
  const page_cache_ref& ref() const { return ref_; }
  uint32_t slots() const { return ref_.slots(); }
  uint32_t page_size() const { return ref_.page_size(); }
  bool on_gpu() const { return gpu_; }

  // Throws, naming both numbers, unless `resident_warps` warps can each pin
  // pages_per_warp pages at once (the condition for forward progress), and
  // `cursors` more per lane: the pages array_cursors keep pinned between
  // accesses.
  void check_capacity(uint64_t resident_warps, uint32_t cursors = 0) const;

  // Writes every dirty page back, then flushes each writable dataset's
  // namespace (durable). Returns the first error; failed pages stay dirty.
  virtual request_status flush() = 0;
  // Makes pages [first_page, last_page] of dataset `id` durable (page_cache_ref::persist,
  // run by the cache's own kernel or CPU loop; safe beside running kernels).
  virtual request_status persist(uint32_t id, uint64_t first_page, uint64_t last_page) = 0;
  // Writes back (as flush) and empties the cache.
  virtual request_status clear() = 0;
  virtual cache_stats stats() const = 0;
  virtual void reset_stats() = 0;
  // The first error any access met since the last clear_error().
  virtual request_status last_error() const = 0;
  virtual void clear_error() = 0;
  // Whether a file the direct tier maps was cut short under it (truncated):
  // reads past its new end found zeros, so results since may be wrong.
  // Sticky until the cache goes.
  bool mapped_file_cut() const;
  // Counters, slot states and queue state, for watchdogs and bug reports.
  virtual std::string dump() const;

 protected:
  page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg, bool gpu);
  // Lays out metadata in `meta` (as the clients see it) and page data in
  // `data`; `queues` are the clients' views of the cache's queue pairs.
  void build_ref(uint8_t* meta, uint8_t* data, const std::vector<queue_ref>& queues);
  // Host image of metadata (initial state), written to the cache's memory by the backend.
  std::vector<uint8_t> initial_metadata(const std::vector<queue_ref>& queues) const;
  virtual void write_dataset(uint32_t id, const dataset_desc& d) = 0;
  // Host memory as this cache's clients address it (registered and mapped
  // for a GPU), or nullptr if it cannot be used.
  virtual const uint8_t* direct_pointer(void* host, uint64_t bytes, bool read_only) = 0;
  // The source an automatic dataset gets, and its route in words.
  page_source automatic_source(uint32_t nsid, const namespace_info& info, const dataset_desc& d, std::string& route);
  // The host mapping of namespace nsid, if any; `why_not` says why there
  // is none where one was allowed (for the dataset's route).
  const uint8_t* host_mapping_of(uint32_t nsid, const namespace_info& info, std::string& why_not);
  // The namespace's arena of a server's host-memory tier, where there is
  // one whose pages are this cache's size (tier_layout.hpp); else detached.
  tier_ref tier_of(uint32_t nsid, const dataset_desc& d);
  // NVMe Flush of every writable dataset through the control queue.
  request_status flush_namespaces();
  // The statistics shards and the error flag, where the backend reads them.
  cache_stats_shard* stats_memory() const { return ref_.stats; }
  uint32_t* error_memory() const { return ref_.error_word; }

  std::shared_ptr<controller_link> link_;
  cache_config cfg_;
  bool gpu_;
  cache_geometry geo_{};
  cache_meta_layout layout_{};
  page_cache_ref ref_{};
  std::vector<dataset_desc> datasets_;
  std::vector<std::string> routes_;  // by dataset id
  std::vector<std::shared_ptr<const host_mapping>> mappings_;  // what the direct tier reads (outlives registrations)
  std::unique_ptr<host_queue_client> control_;  // flushes and identify from the host
};

// A CPU-side cache: slots in host memory, CPU threads as clients.
std::shared_ptr<page_cache> make_host_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg = {});
// A GPU cache: slots in device memory, GPU threads as clients (deepwell_cuda;
// declared here, defined in src/cache/gpu_page_cache.cu).
std::shared_ptr<page_cache> make_gpu_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg = {});

}  // namespace deepwell
