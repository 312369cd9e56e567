// The page cache's host side: configuration checks, the metadata image,
// datasets, and the CPU backend (slots in host memory, CPU threads as
// clients). The GPU backend is src/cache/gpu_page_cache.cu.
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/defaults.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "deepwell/common/detail/log.hpp"

namespace deepwell {

namespace {

bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

uint32_t log2u(uint32_t v) {
  uint32_t s = 0;
  while ((1u << s) < v) ++s;
  return s;
}

}  // namespace

page_cache::page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg, bool gpu)
    : link_(std::move(link)), cfg_(cfg), gpu_(gpu) {
  if (!link_) throw error("page cache: no controller link");
  if (!is_pow2(cfg_.page_size) || cfg_.page_size < 512 || cfg_.page_size > 65536)
    throw error("page cache: page size " + std::to_string(cfg_.page_size) +
                " is not a power of two from 512 to 65536 bytes");
  if (cfg_.capacity_bytes < cfg_.page_size)
    throw error("page cache: capacity " + std::to_string(cfg_.capacity_bytes) + " bytes holds no page of " +
                std::to_string(cfg_.page_size) + " bytes");
  const uint64_t slots = cfg_.capacity_bytes / cfg_.page_size;
  if (slots >= (1ull << 31)) throw error("page cache: " + std::to_string(slots) + " pages is more than 2^31");
  if (cfg_.queue_pairs == 0) cfg_.queue_pairs = gpu ? defaults::gpu_queue_pairs() : defaults::cpu_queue_pairs();
  if (cfg_.queue_pairs > 65535) throw error("page cache: at most 65535 queue pairs");
  if (!is_pow2(cfg_.queue_entries) || cfg_.queue_entries < 4 || cfg_.queue_entries > 65536)
    throw error("page cache: queue entries " + std::to_string(cfg_.queue_entries) +
                " is not a power of two from 4 to 65536");
  if (cfg_.max_datasets == 0 || cfg_.max_datasets > 65535)
    throw error("page cache: max_datasets must be 1 to 65535");
  if (cfg_.timeout_ns == 0) throw error("page cache: timeout_ns must be positive");
  if (!(cfg_.clean_threshold >= 0.0 && cfg_.clean_threshold <= 1.0))
    throw error("page cache: clean_threshold " + std::to_string(cfg_.clean_threshold) +
                " is not a share of the slots from 0 to 1");
  geo_.page_size = cfg_.page_size;
  geo_.slots = uint32_t(slots);
  // Four directory entries per slot: a bucket of 16 then holds 4 on
  // average and almost never fills.
  uint64_t buckets = 1;
  while (buckets * dir_ways < 4 * slots) buckets <<= 1;
  geo_.buckets = uint32_t(buckets);
  // Two page hints per slot or more (a power of two): 16 bytes a slot.
  uint64_t hints = 1;
  while (hints < 2 * slots && hints < (1ull << 31)) hints <<= 1;
  geo_.hints = uint32_t(hints);
  geo_.queues = cfg_.queue_pairs;
  geo_.queue_entries = cfg_.queue_entries;
  geo_.max_datasets = cfg_.max_datasets;
  layout_ = compute_cache_layout(geo_, sizeof(queue_ref));
  qp_geometry control_geometry{4, 4, 4096};
  control_ = std::make_unique<host_queue_client>(link_->open_queue_pair(control_geometry));
}

page_cache::~page_cache() = default;

std::vector<uint8_t> page_cache::initial_metadata(const std::vector<queue_ref>& queues) const {
  std::vector<uint8_t> img(layout_.total, 0);
  std::memset(img.data() + layout_.slot_key, 0xFF, uint64_t(geo_.slots) * 8);
  std::memset(img.data() + layout_.dir_keys, 0xFF, uint64_t(geo_.buckets) * dir_ways * 8);
  std::memset(img.data() + layout_.io_slot, 0xFF, uint64_t(geo_.queues) * geo_.queue_entries * 4);
  std::memcpy(img.data() + layout_.queues, queues.data(), queues.size() * sizeof(queue_ref));
  std::memcpy(img.data() + layout_.datasets, datasets_.data(), datasets_.size() * sizeof(dataset_desc));
  return img;
}

void page_cache::build_ref(uint8_t* meta, uint8_t* data, const std::vector<queue_ref>& queues) {
  ref_.data = data;
  ref_.state = reinterpret_cast<slot_word*>(meta + layout_.state);
  ref_.slot_key = reinterpret_cast<uint64_t*>(meta + layout_.slot_key);
  ref_.slot_io = reinterpret_cast<uint32_t*>(meta + layout_.slot_io);
  ref_.io_slot = reinterpret_cast<uint32_t*>(meta + layout_.io_slot);
  ref_.orphans = reinterpret_cast<uint32_t*>(meta + layout_.orphans);
  ref_.dirty_pages = reinterpret_cast<unsigned long long*>(meta + layout_.dirty);
  ref_.dir.keys = reinterpret_cast<uint64_t*>(meta + layout_.dir_keys);
  ref_.dir.slots = reinterpret_cast<uint32_t*>(meta + layout_.dir_slots);
  ref_.dir.locks = reinterpret_cast<uint32_t*>(meta + layout_.dir_locks);
  ref_.hints = reinterpret_cast<uint64_t*>(meta + layout_.hints);
  ref_.hint_mask = geo_.hints - 1;
  ref_.clock = reinterpret_cast<unsigned long long*>(meta + layout_.clock);
  ref_.error_word = reinterpret_cast<uint32_t*>(meta + layout_.error);
  ref_.stats = reinterpret_cast<cache_stats_shard*>(meta + layout_.stats);
  ref_.queues = reinterpret_cast<const queue_ref*>(meta + layout_.queues);
  ref_.datasets = reinterpret_cast<const dataset_desc*>(meta + layout_.datasets);
  ref_.persists = reinterpret_cast<persist_epoch*>(meta + layout_.persists);
  ref_.ndatasets = geo_.max_datasets;
  ref_.nslots_ = geo_.slots;
  ref_.dir.nbuckets = geo_.buckets;
  ref_.page_size_ = geo_.page_size;
  ref_.page_shift_ = log2u(geo_.page_size);
  ref_.nqueues = uint32_t(queues.size());
  ref_.io_stride = geo_.queue_entries;
  ref_.clean_above = uint32_t(cfg_.clean_threshold * geo_.slots);
  if (cfg_.clean_threshold > 0 && ref_.clean_above == 0) ref_.clean_above = 1;
  // An eighth of a sweep ahead (at most 4096 slots): far enough that the
  // write has completed when the hand arrives, near enough that the page
  // is still a victim then.
  ref_.clean_ahead = std::max<uint32_t>(1, std::min<uint32_t>(geo_.slots / 8, 4096));
  ref_.timeout_ns = cfg_.timeout_ns;
}

namespace {
// The source an owner declares (link or windows), and its route in words.
page_source declared_source(const page_cache::dataset_options& o, const namespace_info& info, std::string& route) {
  if (o.source == page_cache::dataset_options::source_t::windows) {
    route = "the mappings of open windows where their owner set one, other misses queued to " + info.route;
    return page_source::from_windows(o.windows, o.window_shift);
  }
  route = "queued to " + info.route;
  return page_source::from_link();
}
}  // namespace

uint32_t page_cache::add_dataset(uint32_t nsid, const dataset_options& o) {
  using source_t = dataset_options::source_t;
  if (o.source == source_t::windows && (!o.windows || o.window_shift >= 64))
    throw error("page cache: a dataset of window mappings needs a table and a shift below 64");
  if (o.writeback_counts && o.writeback_shift >= 64)
    throw error("page cache: a write-back tally needs a shift below 64");
  const namespace_info info = link_->info(nsid);  // throws for an unknown namespace
  // One id per namespace: cache keys carry the dataset id, so two ids for
  // one namespace could hold one storage page in two slots.
  for (uint32_t id = 0; id < datasets_.size(); ++id) {
    if (datasets_[id].nsid != nsid) continue;
    if (o.source == source_t::automatic && !o.writeback_counts) return id;
    // An owner declaring its source again (a new file system over a
    // namespace this cache served before): its window table replaces the
    // last owner's, which is gone. A mapping or a tier the link gave is
    // not the owner's to replace.
    dataset_desc& d = datasets_[id];
    const bool owned = d.source.kind == page_source_kind::link ||
                       d.source.kind == page_source_kind::window_mappings;
    if (o.source != source_t::automatic && !owned)
      throw error("page cache: namespace " + std::to_string(nsid) + " is served already from another source (" +
                  routes_[id] + ")");
    if (o.source != source_t::automatic) {
      std::string route;
      d.source = declared_source(o, info, route);
      routes_[id] = info.description + ": " + route;
    }
    // An owner's declaration names its tally too: none where it gives none
    // (the last owner's words are gone with it).
    d.tally = writeback_tally{o.writeback_counts, o.writeback_shift};
    write_dataset(id, d);
    return id;
  }
  if (info.block_size > geo_.page_size)
    throw error("page cache: namespace " + std::to_string(nsid) + " has " + std::to_string(info.block_size) +
                "-byte blocks, larger than the cache's " + std::to_string(geo_.page_size) +
                "-byte pages (a page must hold whole blocks)");
  if (datasets_.size() >= geo_.max_datasets)
    throw error("page cache: already serves " + std::to_string(datasets_.size()) + " datasets (max_datasets)");
  if (info.bytes == 0) throw error("page cache: namespace " + std::to_string(nsid) + " is empty");
  dataset_desc d;
  d.nsid = nsid;
  d.block_size = info.block_size;
  d.blocks_per_page = geo_.page_size / info.block_size;
  d.read_only = info.read_only ? 1 : 0;
  d.bytes = info.bytes;
  d.blocks = info.blocks;
  d.pages = (info.bytes + geo_.page_size - 1) / geo_.page_size;
  std::string route;
  d.source = o.source == source_t::automatic ? automatic_source(nsid, info, d, route) : declared_source(o, info, route);
  d.tally = writeback_tally{o.writeback_counts, o.writeback_shift};
  route = info.description + ": " + route;
  const uint32_t id = uint32_t(datasets_.size());
  datasets_.push_back(d);
  routes_.push_back(route);
  write_dataset(id, d);
  detail::log_line(detail::log_level::info, "dataset " + std::to_string(id) + " (namespace " + std::to_string(nsid) +
                                                ") of a " + (gpu_ ? "GPU" : "host") + " cache: " + route);
  return id;
}

page_source page_cache::automatic_source(uint32_t nsid, const namespace_info& info, const dataset_desc& d,
                                         std::string& route) {
  std::string why_not;
  page_source src;
  if (const uint8_t* host = host_mapping_of(nsid, info, why_not)) {
    src = page_source::from_host(host);
    route = std::string("the direct tier: ") +
            (mappings_.back()->file ? "a read-only mapping of the file" : "the dataset's host memory") +
            ", no controller round trip";
  } else if (const tier_ref t = tier_of(nsid, d); t.attached()) {
    src = page_source::from_tier(t);
    route = "the server's host-memory tier (resident pages copied with no command), other misses through " + info.route;
  } else {
    route = "queued to " + info.route;
  }
  if (!why_not.empty()) route += " (no direct tier: " + why_not + ")";
  return src;
}

const std::string& page_cache::route(uint32_t id) const {
  if (id >= routes_.size()) throw error("page cache: no dataset " + std::to_string(id));
  return routes_[id];
}

const uint8_t* page_cache::host_mapping_of(uint32_t nsid, const namespace_info& info, std::string& why_not) {
  if (!cfg_.direct_tier) return nullptr;
  const bool files = info.read_only && cfg_.direct_files != cache_config::file_tier::never;
  std::shared_ptr<const host_mapping> m = link_->map_dataset(nsid, files);
  if (!m) return nullptr;
  if (m->file && cfg_.direct_files == cache_config::file_tier::resident && m->resident < defaults::builtin::direct_resident_share) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", 100 * m->resident);
    why_not = std::string("only ") + share + " of the file was in the page cache when it was added";
    return nullptr;
  }
  const uint8_t* base = direct_pointer(m->base, m->base_bytes, m->file);
  if (!base) {
    why_not = gpu_ ? "the GPU could not register its memory" : "its memory could not be used";
    return nullptr;
  }
  mappings_.push_back(m);
  return base + (m->data - static_cast<const uint8_t*>(m->base));
}

tier_ref page_cache::tier_of(uint32_t nsid, const dataset_desc& d) {
  if (!cfg_.direct_tier) return {};
  std::shared_ptr<const host_mapping> m = link_->map_tier(nsid);
  if (!m || m->base_bytes < sizeof(tier_header)) return {};
  // The server's word on the arena's layout, checked before any of it is
  // used: a mismatch (another page size, another version) means no tier.
  const auto* h = static_cast<const tier_header*>(m->base);
  if (h->magic != tier_magic || h->version != tier_layout_version || h->page_bytes != geo_.page_size ||
      h->pages != d.pages || h->frames == 0 || h->frames >= (1ull << 32) || h->bytes > m->base_bytes)
    return {};
  const tier_geometry g = tier_geometry::of(h->pages, h->frames, h->page_bytes);
  if (g.bytes != h->bytes || g.index_offset != h->index_offset || g.seq_offset != h->seq_offset ||
      g.data_offset != h->data_offset)
    return {};
  const uint8_t* base = direct_pointer(m->base, m->base_bytes, true);
  if (!base) return {};
  mappings_.push_back(m);
  tier_ref t;
  t.index = reinterpret_cast<const uint32_t*>(base + g.index_offset);
  t.seq = reinterpret_cast<const uint64_t*>(base + g.seq_offset);
  t.data = base + g.data_offset;
  t.pages = h->pages;
  t.frames = uint32_t(h->frames);
  t.page_shift = ref_.page_shift();
  return t;
}

bool page_cache::mapped_file_cut() const {
  for (const auto& m : mappings_)
    if (m->cut()) return true;
  return false;
}

const dataset_desc& page_cache::dataset(uint32_t id) const {
  if (id >= datasets_.size()) throw error("page cache: no dataset " + std::to_string(id));
  return datasets_[id];
}

void page_cache::check_capacity(uint64_t resident_warps, uint32_t cursors) const {
  const uint64_t each = uint64_t(pages_per_warp) * (1 + uint64_t(cursors));
  const uint64_t need = resident_warps * each;
  if (geo_.slots < need)
    throw error("page cache of " + std::to_string(geo_.slots) + " pages is too small for " +
                std::to_string(resident_warps) + " resident warps: they may pin " + std::to_string(need) +
                " pages at once (" + std::to_string(each) + " each" +
                (cursors ? ", " + std::to_string(cursors) + " cursor(s) per lane included" : std::string()) +
                "); give it at least " + std::to_string(need * geo_.page_size) + " bytes or launch fewer warps");
}

request_status page_cache::flush_namespaces() {
  std::set<uint32_t> done;
  request_status first{};
  for (const dataset_desc& d : datasets_) {
    if (d.read_only || !done.insert(d.nsid).second) continue;
    const request_status r = control_->flush(d.nsid, cfg_.timeout_ns);
    if (!r.ok() && first.ok()) first = r;
  }
  return first;
}

std::string page_cache::dump() const {
  const cache_stats s = stats();
  std::ostringstream o;
  o << "page cache: " << (gpu_ ? "GPU" : "CPU") << ", " << geo_.slots << " pages of " << geo_.page_size
    << " bytes, " << geo_.buckets << " directory buckets, " << geo_.queues << " queue pairs, " << datasets_.size()
    << " datasets\n"
    << "  accesses " << s.accesses << ", hits " << s.hits << ", misses " << s.misses << ", waits " << s.waits
    << ", evictions " << s.evictions << ", write-backs " << s.writebacks << " (" << s.cleans
    << " by the cleaner), orphans reaped " << s.reaped << ", persist flushes " << s.flushes << ", errors " << s.errors << "\n"
    << "  first error: " << describe(last_error()) << "\n"
    << link_->dump();
  return o.str();
}

// ---------------------------------------------------------------------------
// CPU backend

namespace {

class host_page_cache final : public page_cache {
 public:
  host_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg)
      : page_cache(std::move(link), cfg, false) {
    qp_geometry g{cfg_.queue_entries, cfg_.queue_entries, geo_.page_size};
    std::vector<queue_ref> refs;
    for (uint32_t i = 0; i < cfg_.queue_pairs; ++i) {
      clients_.push_back(std::make_unique<host_queue_client>(link_->open_queue_pair(g)));
      refs.push_back(clients_.back()->ref());
    }
    meta_ = static_cast<uint8_t*>(std::aligned_alloc(128, layout_.total));
    const uint64_t data_bytes = uint64_t(geo_.slots) * geo_.page_size;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (data_bytes + 4095) / 4096 * 4096));
    if (!meta_ || !data_) {
      std::free(meta_);
      std::free(data_);
      throw error("page cache: out of host memory for " + std::to_string(data_bytes) + " bytes of pages");
    }
    const std::vector<uint8_t> img = initial_metadata(refs);
    std::memcpy(meta_, img.data(), img.size());
    build_ref(meta_, data_, refs);
  }
  ~host_page_cache() override {
    std::free(meta_);
    std::free(data_);
  }

  request_status flush() override {
    request_status first{};
    // A slot at a time, through the same code the GPU's warps run.
    for (uint32_t s = 0; s < geo_.slots; ++s) {
      const request_status r = ref_.flush_warp(one_lane{}, s);
      if (!r.ok() && first.ok()) first = r;
    }
    const request_status n = flush_namespaces();
    return first.ok() ? n : first;
  }

  request_status persist(uint32_t id, uint64_t first_page, uint64_t last_page) override {
    (void)dataset(id);  // throws for an unknown id
    return ref_.persist(one_lane{}, id, first_page, last_page);
  }

  request_status clear() override {
    // Prefetches nobody read still hold command ids: finish them first.
    for (uint32_t s = 0; s < geo_.slots; ++s) ref_.finish_orphan(s);
    const request_status r = flush();
    // Slots and the directory start over; statistics, the error flag, queues
    // and datasets stay, and so do pages whose write-back failed.
    for (uint32_t s = 0; s < geo_.slots; ++s) ref_.drop_clean(s);
    return r;
  }

  cache_stats stats() const override {
    std::vector<cache_stats_shard> copy(cache_stats_shards);
    for (uint32_t i = 0; i < cache_stats_shards; ++i) {
      auto* src = reinterpret_cast<unsigned long long*>(&stats_memory()[i]);
      auto* dst = reinterpret_cast<unsigned long long*>(&copy[i]);
      for (size_t k = 0; k < sizeof(cache_stats_shard) / 8; ++k)
        dst[k] = client_atomic<unsigned long long>(src[k]).load(memory_order_relaxed);
    }
    return sum_stats(copy.data(), cache_stats_shards);
  }
  void reset_stats() override { std::memset(static_cast<void*>(stats_memory()), 0, sizeof(cache_stats_shard) * cache_stats_shards); }
  request_status last_error() const override {
    return request_status::unpack(client_atomic<uint32_t>(*error_memory()).load(memory_order_relaxed));
  }
  void clear_error() override { client_atomic<uint32_t>(*error_memory()).store(0, memory_order_relaxed); }

 protected:
  void write_dataset(uint32_t id, const dataset_desc& d) override {
    std::memcpy(meta_ + layout_.datasets + id * sizeof(dataset_desc), &d, sizeof(d));
  }
  const uint8_t* direct_pointer(void* host, uint64_t, bool) override { return static_cast<const uint8_t*>(host); }
  void unshare_host(void*) override {}

 private:
  std::vector<std::unique_ptr<host_queue_client>> clients_;
  uint8_t* meta_ = nullptr;
  uint8_t* data_ = nullptr;
};

}  // namespace

std::shared_ptr<page_cache> make_host_page_cache(std::shared_ptr<controller_link> link, const cache_config& cfg) {
  return std::make_shared<host_page_cache>(std::move(link), cfg);
}

}  // namespace deepwell
