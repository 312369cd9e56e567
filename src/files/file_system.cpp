// The file API's host object (files/file_system.hpp): its options
// checked, the tree session opened, client memory laid out, the service
// and closer threads started and stopped; stats() and sync(). The parts
// it starts are in file_system_impl.hpp.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/common/thread_times.hpp"
#include "file_system_impl.hpp"

namespace deepwell {

file_system::impl::impl(std::shared_ptr<page_cache> pc, const file_system_options& o,
                         std::unique_ptr<client_memory> m)
    : cache(std::move(pc)), opts(o), mem(std::move(m)) {}

file_system::impl::~impl() {
  stopping.store(true);
  for (std::thread& t : services) t.join();
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    closer_stop = true;  // it finishes what is pending first (each close has a deadline)
  }
  pending_cv.notify_all();
  if (closer.joinable()) closer.join();
  if (!tree) return;  // the constructor failed before it had one
  raise_window_watermark(*cache, nsid, next_window);  // the service threads have stopped
  std::vector<tree_call> calls;
  for (uint64_t d : dirs)
    if (d) calls.push_back(call_of(tree_op_kind::closedir, d));
  for (auto& e : table)
    if (e) calls.push_back(call_of(tree_op_kind::detach, 0, e->window));
  run_tree(*tree, calls.data(), calls.size());  // a server gone has ended the session itself
  table.clear();  // the files' ids go before the session
  for (auto& [w, m] : window_maps) m.release(*cache);
  for (detail::direct_map& m : orphan_maps) m.release(*cache);
  // The cache no longer reads this file system's window table nor counts
  // write-backs into its words: both are client memory freed with it,
  // and pages of the namespace may stay in the cache after it.
  try {
    page_cache::dataset_options gone;
    gone.source = page_cache::dataset_options::source_t::link;
    cache->add_dataset(nsid, gone);
  } catch (const std::exception& e) {
    detail::log_line(detail::log_level::warn, std::string("file system: releasing its page source: ") + e.what());
  }
}

file_system::file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts,
                         std::unique_ptr<client_memory> memory)
    : p_(std::make_unique<impl>(std::move(cache), opts, std::move(memory))) {
  impl& p = *p_;
  if (!p.cache) throw error("file system: no page cache");
  if (p.opts.root.empty()) throw error("file system: no root directory given");
  if (p.opts.max_open == 0 || p.opts.max_open > (1u << 20))
    throw error("file system: max_open " + std::to_string(p.opts.max_open) + " is outside 1 to 1048576");
  if (p.opts.reply_poll_ns > 1000000)
    throw error("file system: reply_poll_ns " + std::to_string(p.opts.reply_poll_ns) + " is above 1000000 (1 ms)");
  if (p.opts.service_threads == 0 || p.opts.service_threads > 64)
    throw error("file system: service_threads " + std::to_string(p.opts.service_threads) + " is outside 1 to 64");
  if (p.opts.max_dirs == 0 || p.opts.slots == 0 || p.opts.slots > 4096)
    throw error("file system: max_dirs must be positive and slots from 1 to 4096 (got " +
                std::to_string(p.opts.max_dirs) + ", " + std::to_string(p.opts.slots) + ")");
  // The tree: its ids (and attached windows) for every file open at once,
  // for the opens of files open already, which a batch makes before it
  // finds them open, and for the closed files' detaches a service thread
  // holds back for its next message.
  tree_request tr;
  tr.name = p.opts.root;
  tr.writable = !p.opts.read_only;
  tr.max_open = p.opts.max_open + p.opts.slots + std::min(p.opts.service_threads, p.opts.slots) * tree_batch_max;
  tr.max_dirs = p.opts.max_dirs;
  p.tree = p.cache->link().open_tree(tr);
  // The process's descriptor table grown now to hold max_open more files
  // (in-process trees open them here). Grown by the service's opens
  // instead (a doubling each time it fills; in a process of several
  // threads each growth waits for an RCU grace period, milliseconds with
  // busy pollers, and every opener waits meanwhile), the opens' system
  // calls were off a CPU 52-86% of their time during a grep on an H200
  // machine, about 6 us an open instead of 2.5. A descriptor dup'ed that
  // high, then closed, leaves the table that large (it never shrinks).
  // Where the descriptor limit is lower, the table stays.
  if (const int probe = ::open("/", O_PATH | O_CLOEXEC); probe >= 0) {
    rlimit lim{};
    const uint64_t want = uint64_t(probe) + p.opts.max_open + 64;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && want < lim.rlim_cur) {
      const int high = ::fcntl(probe, F_DUPFD_CLOEXEC, int(want));
      if (high >= 0) ::close(high);
    }
    ::close(probe);
  }
  // The windows: the session's, as far as the cache's keys reach (2^48
  // pages of the cache's size).
  const uint32_t shift = p.cache->ref().page_shift();
  const uint32_t bits = std::min<uint32_t>(60, key_page_bits + shift);
  static_assert(60 - gfs_window_shift <= gfs_tag_window_bits, "a tag holds every window");
  // Above every window this cache may hold pages of in this namespace (a
  // server's namespace serves one session after another: a session's
  // windows are numbered afresh, its files are new).
  p.next_window = std::max(p.tree->first_window(), impl::window_watermark(*p.cache, p.tree->nsid()));
  p.max_windows = uint32_t(std::min<uint64_t>(uint64_t(p.tree->first_window()) + p.tree->windows(),
                                              1ull << (bits - gfs_window_shift)));
  p.nsid = p.tree->nsid();
  // A word per window: the write-backs submitted (gclose_async).
  p.write_counts = static_cast<uint32_t*>(p.mem->alloc_private(sizeof(uint32_t) * uint64_t(p.max_windows)));
  // Window mappings (the direct tier of a read-only file that is resident
  // and registered: a window_source per window), where the cache allows them.
  const cache_config& cc = p.cache->config();
  using tier = file_system_options::direct_tier;
  p.direct_enabled = cc.direct_tier && cc.direct_files != cache_config::file_tier::never &&
                     (p.opts.files_direct == tier::on || (p.opts.files_direct == tier::automatic && p.cache->on_gpu()));
  p.direct_need_resident = cc.direct_files == cache_config::file_tier::resident;
  p.direct_budget = p.opts.direct_max_bytes
                        ? p.opts.direct_max_bytes
                        : uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE)) / 4;
  // The namespace's page source, declared before the array adds it.
  page_cache::dataset_options source;
  source.source = page_cache::dataset_options::source_t::link;
  source.writeback_counts = p.write_counts;
  source.writeback_shift = gfs_window_shift - shift;
  if (p.direct_enabled) {
    p.windows = static_cast<window_source*>(p.mem->alloc_private(sizeof(window_source) * uint64_t(p.max_windows)));
    source.source = page_cache::dataset_options::source_t::windows;
    source.windows = p.windows;
    source.window_shift = gfs_window_shift - shift;
  }
  p.cache->add_dataset(p.nsid, source);
  p.bytes = std::make_unique<array<uint8_t>>(p.cache, p.nsid);

  p.slots = static_cast<gfs_slot*>(p.mem->alloc_shared(sizeof(gfs_slot) * p.opts.slots));
  p.served.assign(p.opts.slots, 0);
  p.files = static_cast<gfs_open_entry*>(p.mem->alloc_private(sizeof(gfs_open_entry) * p.opts.max_open));
  p.table.resize(p.opts.max_open);
  // Buckets up front: a rehash of thousands of entries would happen under
  // the tables' lock, with every service thread waiting.
  p.by_inode.reserve(std::min<uint32_t>(p.opts.max_open, 1u << 16));
  p.retained.reserve(1u << 15);
  for (uint32_t i = 0; i < p.opts.max_open; ++i) p.free_fds.push_back(i);
  p.clear_ticket.assign(p.opts.max_open, 0);
  p.entry_gen.assign(p.opts.max_open, 0);
  p.dirs.assign(p.opts.max_dirs, 0);
  for (uint32_t i = p.opts.max_dirs; i-- > 0;) p.free_dirs.push_back(i);

  ref_.bytes = p.bytes->ref();
  ref_.slots = static_cast<gfs_slot*>(p.mem->client_address(p.slots));
  ref_.free_slots = make_slot_queue(*p.mem, p.opts.slots);
  ref_.files = p.files;
  ref_.max_open = p.opts.max_open;
  ref_.zeros_bytes = p.cache->page_size();
  ref_.zeros = static_cast<const uint8_t*>(p.mem->alloc_private(ref_.zeros_bytes));
  ref_.timeout_ns = p.opts.timeout_ns ? p.opts.timeout_ns : p.cache->config().timeout_ns;
  ref_.write_counts = p.write_counts;
  ref_.reply_poll_ns = p.opts.reply_poll_ns;
  if (p.opts.profile_service) {
    p.call_ns = static_cast<uint64_t*>(p.mem->alloc_private(6 * sizeof(uint64_t)));  // zeroed
    ref_.call_ns = p.call_ns;
  }
  // Named, so that thread_clock (and top -H) tell them from the pollers:
  // dw-fsI-K and dw-fsI-closer, I counting this process's file systems.
  static std::atomic<uint32_t> made{0};
  const std::string name = "dw-fs" + std::to_string(made.fetch_add(1) % 100);
  p.closer = std::thread([&p] { p.close_in_background(); });
  name_thread(p.closer, name + "-closer");
  const uint32_t n = std::min(p.opts.service_threads, p.opts.slots);
  for (uint32_t k = 0; k < n; ++k) {
    p.services.emplace_back([&p, k, n] { p.run(k, n); });
    name_thread(p.services.back(), name + "-" + std::to_string(k));
  }
}

file_system::~file_system() = default;

const std::string& file_system::root() const { return p_->opts.root; }

file_system_stats file_system::stats() const {
  std::lock_guard<std::mutex> lock(p_->stats_mutex);
  file_system_stats s = p_->st;
  s.lock_wait_ns = p_->lock_wait_ns.load(std::memory_order_relaxed);
  if (p_->call_ns) {  // profile_service: the clients' counters
    uint64_t c[6] = {};
    p_->mem->read_private(c, p_->call_ns, sizeof c);
    s.client_calls = c[0];
    s.client_slot_ns = c[1];
    s.client_wait_ns = c[2];
    s.client_read_ns = c[3];
    s.client_slot_polls = c[4];
    s.client_slot_waits = c[5];
  }
  s.window_target_ns = p_->window_target_ns.load(std::memory_order_relaxed);
  s.direct_tier_bytes = p_->direct_pinned.load(std::memory_order_relaxed);
  return s;
}

void file_system::sync() {
  impl& p = *p_;
  {
    // gclose_async's closes first: each ends by its deadline.
    std::unique_lock<std::mutex> lock(p.pending_mutex);
    const uint64_t timeout = p_->opts.timeout_ns ? p_->opts.timeout_ns : p.cache->config().timeout_ns;
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(2 * timeout) + std::chrono::seconds(1);
    for (;;) {
      uint32_t left;
      {
        std::lock_guard<std::mutex> stats(p.stats_mutex);
        left = p.st.closes_pending;
      }
      if (left == 0) break;
      if (std::chrono::steady_clock::now() > until)
        throw error("file system sync: " + std::to_string(left) + " background closes did not finish");
      p.pending_cv.wait_for(lock, std::chrono::milliseconds(1));
    }
    if (!p.background_error.empty()) throw error("file system sync: " + std::exchange(p.background_error, {}));
  }
  p.release_direct();
  std::lock_guard<std::mutex> lock(p.state);
  const uint32_t shift = p.cache->ref().page_shift();
  for (uint32_t h = 0; h < p.table.size(); ++h) {
    auto& o = p.table[h];
    if (!o || !o->file->writable) continue;
    gfs_open_entry e{};
    p.mem->read_private(&e, &p.files[h], sizeof e);
    if (e.tag != o->tag || !e.written) continue;
    if (e.size) {
      const uint64_t first = gfs_ref::base(o->window) >> shift;
      const request_status r = p.cache->persist(p.bytes->ref().dataset, first, first + ((e.size - 1) >> shift));
      if (!r.ok()) throw error("file system sync: writing back " + o->file->path + " failed");
    }
    if (const int err = p.set_size(*o->file, e.size, true))
      throw error("file system sync: setting the size of " + o->file->path + ": " + std::strerror(err));
  }
}

std::shared_ptr<file_system> make_host_file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts) {
  if (cache && cache->on_gpu())
    throw error("make_host_file_system: the cache is a GPU cache (use make_gpu_file_system)");
  return std::make_shared<file_system>(std::move(cache), opts, make_host_client_memory());
}

}  // namespace deepwell
