// The file API's host side (files/file_system.hpp): the service threads that
// answer kernels' requests, path resolution beneath the root, the open-file
// and directory tables, and which windows keep their cached pages.
#include "deepwell/files/file_system.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/common/thread_times.hpp"
#include "deepwell/protocol/tree.hpp"
#include "deepwell/views/array.hpp"
#include "direct_map.hpp"

namespace deepwell {
namespace {

// A service thread's tree ops after the tables' lock (detaches, closes),
// sent with its next message to the tree (serve).
thread_local std::vector<tree_call>* deferred_ops = nullptr;
thread_local tree_session* deferred_tree = nullptr;

// Runs calls[0..n) on the tree, in messages of at most tree_batch_max ops.
// False where the server went away: each call left unanswered gets EIO.
bool run_tree(tree_session& t, tree_call* calls, size_t n) {
  size_t i = 0;
  try {
    for (; i < n; i += tree_batch_max) t.run(calls + i, uint32_t(std::min<size_t>(tree_batch_max, n - i)));
    return true;
  } catch (const error&) {
    for (; i < n; ++i) calls[i].op.err = EIO;
    return false;
  }
}

// A detach or close, whose answer nobody waits for: with the service
// thread's others where it defers them, else now.
void run_or_defer(tree_session& t, tree_call c) {
  if (deferred_ops && deferred_tree == &t) {
    deferred_ops->push_back(std::move(c));
    return;
  }
  run_tree(t, &c, 1);
}

// A file as the tree session holds it: its id there, closed when the last
// reference here goes (a request in flight keeps the session's own).
struct tree_file {
  tree_session* tree = nullptr;
  uint64_t id = 0;
  std::string path;  // relative to the root, for messages
  bool writable = false;
  bool direct = false;      // read with O_DIRECT
  bool write_once = false;  // g_gwronce
  ~tree_file() {
    if (!id) return;
    tree_call c;
    c.op.kind = uint32_t(tree_op_kind::close);
    c.op.file = id;
    run_or_defer(*tree, std::move(c));
  }
};

// Per cache and namespace: one past the windows a file system has handed
// out in it (keyed by the cache's address; a later cache at the same
// address only starts higher).
std::mutex watermark_mutex;
std::map<std::pair<const page_cache*, uint32_t>, uint32_t> watermarks;

uint32_t window_watermark(const page_cache& cache, uint32_t nsid) {
  std::lock_guard<std::mutex> lock(watermark_mutex);
  const auto it = watermarks.find({&cache, nsid});
  return it == watermarks.end() ? 0 : it->second;
}

void raise_window_watermark(const page_cache& cache, uint32_t nsid, uint32_t next) {
  std::lock_guard<std::mutex> lock(watermark_mutex);
  uint32_t& w = watermarks[{&cache, nsid}];
  w = std::max(w, next);
}

tree_call call_of(tree_op_kind k, uint64_t file = 0, uint32_t window = 0, uint64_t size = 0, uint32_t flags = 0) {
  tree_call c;
  c.op.kind = uint32_t(k);
  c.op.file = file;
  c.op.window = window;
  c.op.size = size;
  c.op.flags = flags;
  return c;
}

}  // namespace

struct file_system::impl {
  std::shared_ptr<page_cache> cache;
  file_system_options opts;
  std::unique_ptr<client_memory> mem;
  // The tree: the files, their windows' namespace, the path resolution
  // (in this process, or in the server for this client).
  std::shared_ptr<tree_session> tree;
  uint32_t nsid = 0;
  std::unique_ptr<array<uint8_t>> bytes;
  uint64_t* call_ns = nullptr;  // client memory: gfs_ref::call_ns, with profile_service
  uint32_t max_windows = 0;  // windows [next_window, max_windows) are left to hand out
  uint32_t next_window = 1;  // the session's first (never 0: a default gfile matches nothing)

  gfs_slot* slots = nullptr;        // host address
  gfs_open_entry* files = nullptr;  // client-private
  std::vector<uint32_t> served;     // per slot: the last ticket answered

  struct open_file {
    uint64_t dev = 0;
    uint64_t ino = 0;
    uint32_t window = 0;
    uint32_t tag = 0;  // window | generation << gfs_tag_window_bits (gfs_layout.hpp)
    uint32_t refs = 0;
    uint32_t closing = 0;  // of refs, closes taken from gclose_async and not finished
    std::shared_ptr<tree_file> file;
    int64_t mtime_ns = 0, ctime_ns = 0;  // the file as its first user opened it
    uint64_t size = 0;
    bool had_writer = false;  // some user opened it for writing
  };
  struct retained_window {  // a closed file's window, valid while the file is unchanged
    uint32_t window;
    int64_t mtime_ns, ctime_ns;
    uint64_t size;
  };
  std::vector<std::optional<open_file>> table;
  // Free entries, oldest first: an entry's window word is cleared by a copy
  // that is not waited for at the close (clear_ticket), so reusing entries
  // in the order they were freed leaves that copy time to be done.
  std::deque<uint32_t> free_fds;
  std::vector<uint64_t> clear_ticket;
  std::vector<uint32_t> entry_gen;  // per entry: its generation, raised as it is handed out
  // Keyed by (device, inode); hashed, because they are looked up under the
  // tables' lock at every open and close, and `retained` holds every file
  // closed so far.
  struct inode_hash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return std::hash<uint64_t>{}(uint64_t(k.second) * 0x9E3779B97F4A7C15ull ^ uint64_t(k.first));
    }
  };
  std::atomic<uint64_t> window_target_ns{0};  // profile_service: in the window target's attach and detach
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, inode_hash> by_inode;
  std::unordered_map<std::pair<uint64_t, uint64_t>, retained_window, inode_hash> retained;
  std::vector<uint64_t> dirs;  // the tree's directory ids (0: free)
  std::vector<uint32_t> free_dirs;

  // Direct tiers (file_system_options::files_direct). A window's entry in
  // `windows` (client memory) is set while its registration lives: from
  // the open that made it until the sync() after the file's last close (a
  // GPU cannot unregister memory while a kernel runs), so a stale handle
  // never reads unregistered memory. A reopen of the unchanged file keeps
  // the window and so its registration. Under `state`, with direct_pinned.
  bool direct_enabled = false;
  bool direct_need_resident = true;
  uint64_t direct_budget = 0;
  std::atomic<uint64_t> direct_pinned{0};  // bytes registered (window_maps, orphan_maps), or reserved by an open making one
  window_source* windows = nullptr;
  std::unordered_map<uint32_t, detail::direct_map> window_maps;
  std::vector<detail::direct_map> orphan_maps;  // entries cleared (a writer came), released at sync()
  // Files whose tier an open is making (outside the lock): other openers
  // meanwhile make none, and the maker gives its tier to the file's entry
  // even if another opener made that entry first.
  std::unordered_set<std::pair<uint64_t, uint64_t>, inode_hash> making;

  mutable std::mutex stats_mutex;
  file_system_stats st;
  std::atomic<bool> stopping{false};
  std::vector<std::thread> services;

  // Closes of written files (gclose, gclose_async): each waits until its
  // window's target has completed as many writes as the client had
  // submitted (the write_counts word it sent), then the closer thread sets
  // the file's size and drops the user's reference. A gclose's reply is
  // written then (`reply`: its slot, -1 for gclose_async, which had its
  // reply at once); its warp waits for it.
  struct pending_close {
    uint32_t h, window, started;
    uint64_t size, deadline_ns;
    int32_t reply = -1;
    uint32_t ticket = 0;
  };
  uint32_t* write_counts = nullptr;  // client memory, a word per window
  std::mutex pending_mutex;          // pending, closer_stop, background_error; after `state` when both
  std::condition_variable pending_cv;
  std::vector<pending_close> pending;
  bool closer_stop = false;
  std::string background_error;      // the first failed background close since the last sync()
  std::thread closer;
  // The tables above (files, inodes, windows, directories): one service
  // thread at a time changes them. An open's system calls come before it,
  // and a close's descriptor and tag clear after it (after_lock), so that
  // the service threads overlap their system calls.
  std::mutex state;

  // Held for a microsecond or two by up to service_threads threads: a
  // waiter spins a little before it sleeps (a futex wake-up costs more).
  void lock_state(std::unique_lock<std::mutex>& l) {
    if (l.try_lock()) return;
    const uint64_t t0 = now_ns();
    bool got = false;
    for (int i = 0; i < 256 && !got; ++i) {
      spin_pause();
      got = l.try_lock();
    }
    if (!got) l.lock();
    lock_wait_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> lock_wait_ns{0};

  // Statistics a request changes, added to `st` once, after the tables'
  // lock (stats_mutex is never taken under it).
  struct counts {
    uint32_t opens = 0, files_opened = 0, direct_opens = 0, direct_tier_opens = 0, windows_reused = 0;
    uint32_t closes = 0, closes_pending = 0, open_dirs_up = 0, open_dirs_down = 0;
    int32_t open_files = 0;
  };
  void add(const counts& c) {  // under stats_mutex
    st.opens += c.opens;
    st.files_opened += c.files_opened;
    st.direct_opens += c.direct_opens;
    st.direct_tier_opens += c.direct_tier_opens;
    st.windows_reused += c.windows_reused;
    st.closes += c.closes;
    st.closes_pending += c.closes_pending;
    st.open_dirs = st.open_dirs + c.open_dirs_up - c.open_dirs_down;
    st.open_files = uint32_t(int64_t(st.open_files) + c.open_files);
  }

  // What a request leaves for after the tables' lock.
  struct after_lock {
    std::shared_ptr<tree_file> file;  // the last reference: its id is closed here (deferred in serve)
    int64_t detach = -1;                        // a closed file's window, detached from the target here
    int64_t clear = -1;                         // an entry whose tag the host clears, then frees
    int64_t window = -1;                        // a window whose direct tier entry is written (before the reply)
    // An open's window reserved and attached with it (prepare_opens) that
    // it did not use: detached from that open's file before it closes.
    uint32_t unreserve = 0;
    uint64_t unreserve_file = 0;
    window_source source{};
    bool deferred = false;                      // the closer thread replies (a gclose waiting for its writes)
    counts n;
  };
  struct open_prep {
    int err = 0;
    std::shared_ptr<tree_file> file;
    tree_stat sb{};
    std::optional<detail::direct_map> made;
    bool maker = false;  // this open is the one making the file's tier (in `making`)
    uint32_t reserved = 0;  // the new window its file was attached to as it opened (0: none)
    uint64_t syscall_ns = 0;  // in openat2 and fstat (stats().syscalls_ns)
  };

  void finish(after_lock& later) {
    // Outside the tables' lock (the target's shards have locks of their
    // own, which the pollers take). A service thread defers the detaches
    // and closes to its next message (serve).
    if (later.unreserve) run_or_defer(*tree, call_of(tree_op_kind::detach, later.unreserve_file, later.unreserve));
    if (later.detach >= 0) detach_window(uint32_t(later.detach), later.file.get());
    later.file.reset();
    if (later.window >= 0) mem->write_private(&windows[later.window], &later.source, sizeof later.source);
    if (later.clear >= 0) {
      const uint32_t h = uint32_t(later.clear);
      const uint64_t ticket = mem->zero_private_async(&files[h].tag, sizeof files[h].tag);
      std::unique_lock<std::mutex> lock(state, std::defer_lock);
      lock_state(lock);
      clear_ticket[h] = ticket;
      free_fds.push_back(h);
    }
  }

  impl(std::shared_ptr<page_cache> pc, const file_system_options& o, std::unique_ptr<client_memory> m)
      : cache(std::move(pc)), opts(o), mem(std::move(m)) {}

  ~impl() {
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

  // ---- the service threads ----

  // Service thread k of n answers slots k, k + n, k + 2n, ...
  // Requests a service thread answers together: the opens' system calls
  // first, then every request's table work under one hold of the lock,
  // then what comes after the lock, then the replies. Under load a thread
  // finds several of its slots waiting, and the lock changes hands once
  // for them all.
  static constexpr uint32_t max_batch = 32;
  struct batch {
    uint32_t n = 0;
    uint32_t slot[max_batch], ticket[max_batch];
    uint64_t seen_ns = 0, pass_ns = 0;  // when the pass found them; its length
    open_prep prep[max_batch];
    after_lock later[max_batch];
    std::vector<tree_call> deferred;  // finish()'s tree ops, sent together
  };

  // Service thread k of n answers slots k, k + n, k + 2n, ...
  void run(uint32_t k, uint32_t n) {
    // A 20 us sleep is one of 20 us, not of 70 (the default slack of 50 us).
    prctl(PR_SET_TIMERSLACK, 1000UL);
    auto b = std::make_unique<batch>();
    uint32_t next = k;
    uint64_t idle_since = 0;
    struct flush_at_exit {
      impl& fs;
      batch& b;
      ~flush_at_exit() { fs.run_deferred(b.deferred); }
    } at_exit{*this, *b};
    while (!stopping.load(std::memory_order_relaxed)) {
      b->n = 0;
      const uint64_t pass0 = now_ns();  // also the idle clock below
      // From where the last batch stopped, so that no slot waits behind
      // a busy run of lower ones.
      const uint32_t mine = (opts.slots - k + n - 1) / n;
      for (uint32_t seen = 0; seen < mine && b->n < max_batch; ++seen) {
        const uint32_t i = next;
        next = next + n < opts.slots ? next + n : k;
        const uint32_t t = shared_load_acquire(&slots[i].ticket);
        if (t == served[i]) continue;
        b->slot[b->n] = i;
        b->ticket[b->n++] = t;
      }
      if (b->n) {
        idle_since = 0;
        b->seen_ns = now_ns();
        b->pass_ns = b->seen_ns - pass0;
        serve(*b);
        continue;
      }
      // Nothing waiting: what the last batches left for the tree goes now.
      if (!b->deferred.empty()) run_deferred(b->deferred);
      // Nothing to do: spin a while (a kernel's next request usually comes
      // within microseconds of the last reply), then sleep in short steps,
      // longer ones once idle for long. Counted in passes, a spin of 512
      // pauses had the threads asleep a quarter of a grep's search while
      // warps waited milliseconds for their replies.
      if (!idle_since) idle_since = pass0;
      if (pass0 - idle_since < idle_spin_ns())
        spin_pause();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(pass0 - idle_since < 100'000'000 ? 20 : 200));
    }
  }
  // Where cores are few (CI's two), a spinning service takes them from
  // the clients it waits for.
  static uint64_t idle_spin_ns() {
    static const uint64_t ns = std::thread::hardware_concurrency() >= 8 ? 200'000 : 10'000;
    return ns;
  }

  static uint64_t thread_cpu_ns() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
  }

  void serve(batch& b) {
    const bool profile = opts.profile_service;
    const uint64_t t0 = now_ns(), c0 = profile ? thread_cpu_ns() : 0;
    rusage r0{}, r1{};
    if (profile) getrusage(RUSAGE_THREAD, &r0);
    for (uint32_t j = 0; j < b.n; ++j) {
      gfs_slot& q = slots[b.slot[j]];
      q.r0 = q.r1 = q.r2 = q.r3 = 0;
      b.prep[j] = open_prep{};
      b.later[j] = after_lock{};
    }
    prepare_opens(b);
    uint32_t errors = 0;
    uint64_t locked_open = 0, locked_close = 0;  // profile: under the lock, in opens and in the rest
    const uint64_t t1 = now_ns(), c1 = profile ? thread_cpu_ns() : 0;
    if (profile) getrusage(RUSAGE_THREAD, &r1);
    uint64_t t2, t3;
    {
      std::unique_lock<std::mutex> lock(state, std::defer_lock);
      lock_state(lock);
      t2 = now_ns();
      for (uint32_t j = 0; j < b.n; ++j) {
        gfs_slot& q = slots[b.slot[j]];
        after_lock& later = b.later[j];
        int err = 0;
        const uint64_t r0 = profile ? now_ns() : 0;
        switch (gfs_op(q.op)) {
          case gfs_op::open: err = commit_open(q, b.prep[j], later); break;
          case gfs_op::close: err = do_close(q, later); break;
          case gfs_op::truncate: err = do_truncate(q); break;
          case gfs_op::sync_size: err = do_sync_size(q); break;
          case gfs_op::opendir: err = do_opendir(q, later); break;
          case gfs_op::readdir: err = do_readdir(q); break;
          case gfs_op::closedir: err = do_closedir(q, later); break;
          default: err = EINVAL;
        }
        if (profile) (gfs_op(q.op) == gfs_op::open ? locked_open : locked_close) += now_ns() - r0;
        q.err = err;
        errors += err != 0;
      }
      t3 = now_ns();
    }
    // Before the replies: a freed entry is free when its caller hears of
    // it. The tree ops this leaves (closed files' detaches and closes) wait
    // for the thread's next message to the tree (its next opens) or its
    // first idle pass: a reopen meanwhile attaches its own file, which a
    // detach of the old one (only while that one is attached) leaves alone.
    deferred_ops = &b.deferred;
    deferred_tree = tree.get();
    for (uint32_t j = 0; j < b.n; ++j) finish(b.later[j]);
    deferred_ops = nullptr;
    deferred_tree = nullptr;
    if (b.deferred.size() >= tree_batch_max) run_deferred(b.deferred);
    // The requests' counts before their replies: a caller that reads stats()
    // after its call returned sees the call counted.
    {
      std::lock_guard<std::mutex> stats_lock(stats_mutex);
      for (uint32_t j = 0; j < b.n; ++j) add(b.later[j].n);
      st.requests += b.n;
      st.errors += errors;
    }
    uint32_t replied = 0;
    for (uint32_t j = 0; j < b.n; ++j) {
      if (!b.later[j].deferred) {
        shared_store_release(&slots[b.slot[j]].done, b.ticket[j]);
        ++replied;
      }
      served[b.slot[j]] = b.ticket[j];
    }
    const uint64_t t_replied = now_ns();
    std::lock_guard<std::mutex> stats_lock(stats_mutex);
    st.seen_to_reply_ns += replied * (t_replied - b.seen_ns);
    ++st.passes;
    st.pass_ns += b.pass_ns;
    const uint64_t t4 = now_ns();
    st.service_ns += t4 - t0;
    st.open_calls_ns += t1 - t0;
    st.open_calls_cpu_ns += c1 - c0;
    st.open_calls_sleeps += uint64_t(r1.ru_nvcsw - r0.ru_nvcsw);
    st.open_calls_preempted += uint64_t(r1.ru_nivcsw - r0.ru_nivcsw);
    st.open_calls_faults += uint64_t(r1.ru_minflt - r0.ru_minflt + r1.ru_majflt - r0.ru_majflt);
    for (uint32_t j = 0; j < b.n; ++j) st.syscalls_ns += b.prep[j].syscall_ns;
    st.locked_ns += t3 - t2;
    st.locked_opens_ns += locked_open;
    st.locked_others_ns += locked_close;
    st.after_lock_ns += t4 - t3;
  }

  std::string text_of(const gfs_slot& q) const {
    return std::string(q.text, q.len < gfs_path_max ? q.len : gfs_path_max - 1);
  }

  // The opens' work before the tables' lock: their checks, then the
  // tree's opens of the batch in one go (in this process, system calls
  // several service threads make at once; under a server, one message),
  // then the direct tiers' registrations. Each open's errno in its prep.
  void prepare_opens(batch& b) {
    tree_call calls[max_batch];
    uint32_t of[max_batch], n = 0;
    static_assert(max_batch <= tree_batch_max, "a batch's opens fit in one message");
    for (uint32_t j = 0; j < b.n; ++j) {
      gfs_slot& q = slots[b.slot[j]];
      if (gfs_op(q.op) != gfs_op::open) continue;
      const uint32_t flags = q.flags;
      const uint32_t acc = flags & g_accmode;
      const bool want_write = acc != g_rdonly, write_once = flags & g_gwronce;
      int err = 0;
      if ((flags & ~(g_accmode | g_creat | g_trunc | g_gwronce)) || acc == g_accmode) err = EINVAL;
      else if ((flags & g_trunc) && !want_write) err = EINVAL;
      else if (write_once && acc != g_wronly) err = EINVAL;  // a write-once file is new output: write-only, created, emptied
      else if (want_write && opts.read_only) err = EROFS;
      if (err) {
        b.prep[j].err = err;
        continue;
      }
      tree_call& c = calls[n];
      c = call_of(tree_op_kind::open);
      c.op.flags = (want_write ? tree_open_write : 0) | ((flags & g_creat) ? tree_open_create : 0) |
                   (write_once ? tree_open_write_once : 0) | (!want_write && opts.direct_io ? tree_open_direct : 0);
      c.path = text_of(q);
      c.op.path_bytes = uint32_t(c.path.size());
      of[n++] = j;
    }
    if (!n) return;
    // A new window for each, attached as the file opens (one message less a
    // file under a server): most opens are of files not open already.
    {
      std::unique_lock<std::mutex> lock(state, std::defer_lock);
      lock_state(lock);
      if (max_windows - next_window >= n) {
        for (uint32_t i = 0; i < n; ++i) calls[i].op.window = next_window++;
      }
    }
    // The thread's deferred detaches and closes go first, in the same message.
    const size_t before = b.deferred.size() + n <= tree_batch_max ? b.deferred.size() : 0;
    if (!before) run_deferred(b.deferred);
    for (uint32_t i = 0; i < n; ++i) b.deferred.push_back(std::move(calls[i]));
    const uint64_t c0 = now_ns();
    run_tree(*tree, b.deferred.data(), b.deferred.size());  // the server gone: every open fails with EIO
    for (uint32_t i = 0; i < n; ++i) calls[i] = std::move(b.deferred[before + i]);
    b.deferred.clear();
    const uint64_t per = (now_ns() - c0) / n;
    for (uint32_t i = 0; i < n; ++i) {
      open_prep& p = b.prep[of[i]];
      const tree_op& op = calls[i].op;
      p.syscall_ns = per;
      if (op.err) {
        p.err = op.err;
        continue;
      }
      auto f = std::make_shared<tree_file>();
      f->tree = tree.get();
      f->id = op.id;
      f->path = std::move(calls[i].path);
      f->writable = op.flags & tree_open_write;
      f->direct = op.value != 0;
      f->write_once = op.flags & tree_open_write_once;
      p.file = std::move(f);
      p.sb = op.st;
      p.reserved = op.window;
      // A direct tier, made before the tables' lock (registering a large
      // file takes a while) unless the file has one already.
      if (direct_enabled && !p.file->writable && !p.file->direct && p.sb.size >= opts.direct_min_bytes) {
        const int fd = tree->descriptor(p.file->id);
        if (fd >= 0) p.made = make_direct(fd, p.sb, p.maker);
      }
    }
  }

  // The rest of an open, under the tables' lock.
  int commit_open(gfs_slot& q, open_prep& p, after_lock& later) {
    if (p.err) return p.err;
    const uint32_t flags = q.flags;
    const bool want_write = (flags & g_accmode) != g_rdonly, write_once = flags & g_gwronce;
    std::shared_ptr<tree_file> f = std::move(p.file);
    const bool direct = f->direct;
    tree_stat& sb = p.sb;
    later.unreserve = p.reserved;  // unless it becomes the file's window below
    later.unreserve_file = f->id;
    std::optional<detail::direct_map>& made = p.made;
    const bool maker = p.maker;
    const auto key = std::make_pair(sb.dev, sb.ino);
    // A tier the open does not use (a writer came, or the open fails) is
    // released at sync(): it cannot be unregistered now.
    struct spare_guard {
      impl& fs;
      std::optional<detail::direct_map>& m;
      bool maker;
      std::pair<uint64_t, uint64_t> key;
      ~spare_guard() {
        if (m) fs.orphan_maps.push_back(*m);
        if (maker) fs.making.erase(key);
      }
    } spare{*this, made, maker, key};
    auto it = by_inode.find(key);
    if (it != by_inode.end()) {
      open_file& o = *table[it->second];
      // g_trunc: its pages are cached for other users (truncate through
      // gftruncate). A write-once file is its writer's alone: its cached
      // pages hold zeros where the file has bytes written back.
      if ((flags & g_trunc) || write_once || o.file->write_once) {
        later.file = std::move(f);
        return EBUSY;
      }
      if (want_write && !o.file->writable) {
        // A writer joins readers: the window's descriptor becomes this one
        // (requests in flight keep the old one open until they finish).
        if (const int e = attach_window(o.window, *f)) {
          later.file = std::move(f);
          return e;
        }
        later.file = std::move(o.file);
        o.file = f;
        o.had_writer = true;
        drop_direct(o.window, later);  // the pages may change now: the entry is cleared before the writer hears back
      } else {
        later.file = std::move(f);
        // Its first opener came while this open made the tier.
        if (made && !o.had_writer && use_direct(o.window, made, later)) ++later.n.direct_tier_opens;
      }
      ++o.refs;
      q.r0 = uint64_t(o.tag) << 32 | it->second;
      q.r1 = sb.size;
      q.r2 = sb.mode;
      q.r3 = uint64_t(sb.mtime_ns);
      ++later.n.opens;
      return 0;
    }
    if (free_fds.empty()) {
      later.file = std::move(f);
      return EMFILE;
    }
    if ((flags & g_trunc || write_once) && sb.size != 0) {
      tree_call c[2] = {call_of(tree_op_kind::truncate, f->id, 0, 0), call_of(tree_op_kind::stat, f->id)};
      run_tree(*tree, c, 2);
      if (const int e = c[0].op.err ? c[0].op.err : c[1].op.err) {
        later.file = std::move(f);
        return e;
      }
      sb = c[1].op.st;
    }
    // The window: the one this file had when the GPU last closed it, if the
    // file is unchanged since (its cached pages are still the file's), else
    // a new one.
    uint32_t window = 0;
    bool reused = false;
    auto r = retained.find(key);
    if (r != retained.end()) {
      // The file as this open saw it (its stat, before the tables' lock)
      // may predate a close the closer thread finished meanwhile (its
      // size set once its writes landed): where the two differ, the file
      // is looked at again, so the opener never gets the size from before.
      if (!unchanged(r->second, sb)) {
        const tree_op again = file_op(tree_op_kind::stat, *f);
        if (!again.err) sb = again.st;
      }
      if (!write_once && unchanged(r->second, sb)) {
        window = r->second.window;
        reused = true;
      }
      retained.erase(r);
    }
    if (!window && p.reserved) {
      window = p.reserved;  // attached as it opened
      later.unreserve = 0;
    } else {
      if (!window) {
        if (next_window >= max_windows) {
          later.file = std::move(f);
          return ENFILE;  // every window of this file system has been used
        }
        window = next_window++;
      }
      if (const int e = attach_window(window, *f)) {
        later.file = std::move(f);
        return e;
      }
    }
    const uint32_t h = free_fds.front();
    free_fds.pop_front();
    mem->wait_private(clear_ticket[h]);  // the old tag is gone before the opener publishes its own
    // Generations 1 to 4095: a tag is never 0 (no file).
    entry_gen[h] = entry_gen[h] % ((1u << (32 - gfs_tag_window_bits)) - 1) + 1;
    const uint32_t tag = window | entry_gen[h] << gfs_tag_window_bits;
    if (want_write) {
      drop_direct(window, later);  // a reused window's tier is for readers only
    } else if (made) {
      (void)use_direct(window, made, later);
    }
    const bool tiered = !want_write && window_maps.count(window);
    table[h] = open_file{sb.dev, sb.ino, window, tag, 1, 0, f, sb.mtime_ns, sb.ctime_ns, sb.size, want_write};
    by_inode[key] = h;
    q.r0 = uint64_t(tag) << 32 | h;
    q.r1 = sb.size;
    q.r2 = uint64_t(1) << 32 | sb.mode;  // first user: the caller fills the entry
    q.r3 = uint64_t(sb.mtime_ns);
    counts& n = later.n;
    ++n.opens;
    ++n.files_opened;
    n.direct_opens += direct;
    n.direct_tier_opens += tiered;
    n.windows_reused += reused;
    ++n.open_files;
    return 0;
  }

  // The window target's table has a lock of its own, which the pollers take
  // for every read: its attach and detach are timed with profile_service.
  // Returns 0 or an errno (EIO: the server went away).
  int attach_window(uint32_t w, const tree_file& f) {
    const uint64_t t = opts.profile_service ? now_ns() : 0;
    const int err = ask(call_of(tree_op_kind::attach, f.id, w)).err;
    if (t) window_target_ns.fetch_add(now_ns() - t, std::memory_order_relaxed);
    return err;
  }
  void detach_window(uint32_t w, const tree_file* only) {
    const uint64_t t = opts.profile_service ? now_ns() : 0;
    run_or_defer(*tree, call_of(tree_op_kind::detach, only ? only->id : 0, w));
    if (t) window_target_ns.fetch_add(now_ns() - t, std::memory_order_relaxed);
  }
  // Sends what was deferred, in order, and stops deferring.
  void run_deferred(std::vector<tree_call>& ops) {
    deferred_ops = nullptr;
    deferred_tree = nullptr;
    run_tree(*tree, ops.data(), ops.size());
    ops.clear();
  }
  // One call, answered (EIO where the server went away); a readdir's entry
  // name into `name`.
  tree_op ask(tree_call c, std::string* name = nullptr) {
    run_tree(*tree, &c, 1);
    if (name) *name = std::move(c.name);
    return c.op;
  }

  static bool unchanged(const retained_window& r, const tree_stat& sb) {
    return r.mtime_ns == sb.mtime_ns && r.ctime_ns == sb.ctime_ns && r.size == sb.size;
  }

  // A direct tier for the file open as fd, unless it has one (open, or
  // closed unchanged with its registration kept), another open is making
  // one, a writer has it open, or the budget is spent. maker: set when this
  // open entered the file in `making` (commit_open takes it out).
  std::optional<detail::direct_map> make_direct(int fd, const tree_stat& sb, bool& maker) {
    const uint64_t size = sb.size;
    const auto key = std::make_pair(sb.dev, sb.ino);
    {
      std::unique_lock<std::mutex> tables(state, std::defer_lock);
      lock_state(tables);
      if (making.count(key)) return std::nullopt;
      const auto o = by_inode.find(key);
      if (o != by_inode.end() && (table[o->second]->had_writer || window_maps.count(table[o->second]->window)))
        return std::nullopt;
      const auto r = retained.find(key);
      if (o == by_inode.end() && r != retained.end() && unchanged(r->second, sb) && window_maps.count(r->second.window))
        return std::nullopt;
      if (direct_pinned.load() + size > direct_budget) return std::nullopt;
      direct_pinned += size;  // reserved while it is made
      making.insert(key);
      maker = true;
    }
    std::optional<detail::direct_map> m = detail::direct_map::make(*cache, fd, size, direct_need_resident);
    if (!m) direct_pinned -= size;
    return m;
  }

  // Window w (open, read-only so far) reads through `made` from now on,
  // unless it has a tier already: the entry is written before the reply.
  bool use_direct(uint32_t w, std::optional<detail::direct_map>& made, after_lock& later) {
    if (window_maps.count(w)) return false;  // made stays: an orphan
    later.window = w;
    later.source = {reinterpret_cast<unsigned long long>(made->client), made->file_bytes};
    window_maps[w] = *made;
    made.reset();
    return true;
  }

  // sync(): the direct tiers of files no longer open, and the orphans, are
  // released; their entries are cleared first. Unregistering waits for
  // running kernels, so it happens outside the tables' lock: a service
  // thread (and a kernel waiting on it) is never held up behind it.
  void release_direct() {
    std::vector<detail::direct_map> going;
    {
      std::lock_guard<std::mutex> tables(state);
      if (window_maps.empty() && orphan_maps.empty()) return;
      std::vector<bool> open(max_windows, false);
      for (const auto& e : table)
        if (e) open[e->window] = true;
      const window_source none{};
      for (auto it = window_maps.begin(); it != window_maps.end();) {
        if (open[it->first]) {
          ++it;
          continue;
        }
        mem->write_private(&windows[it->first], &none, sizeof none);
        going.push_back(it->second);
        it = window_maps.erase(it);
      }
      going.insert(going.end(), orphan_maps.begin(), orphan_maps.end());
      orphan_maps.clear();
    }
    for (detail::direct_map& m : going) {
      m.release(*cache);
      direct_pinned -= m.file_bytes;
    }
  }

  // Window w's direct tier, if any, is no longer read: its entry is
  // cleared (in `later`, before the reply) and the registration kept until
  // sync().
  void drop_direct(uint32_t w, after_lock& later) {
    const auto it = window_maps.find(w);
    if (it == window_maps.end()) return;
    orphan_maps.push_back(it->second);
    window_maps.erase(it);
    later.window = w;
    later.source = {};
  }

  open_file* lookup(uint64_t a0) {
    const uint32_t h = uint32_t(a0), tag = uint32_t(a0 >> 32);
    if (h >= table.size() || !table[h] || table[h]->tag != tag) return nullptr;
    return &*table[h];
  }

  // The file on disk gets the size the GPU sees (page write-backs may have
  // written past it); durably for gfsync and sync(), whose callers have
  // just persisted the file's pages (write-back, then the window target's
  // fdatasync), so an fsync is needed only when the size changes here. A
  // close is not durable, as POSIX's is not: gfsync is.
  int set_size(const tree_file& f, uint64_t size, bool durable) {
    return file_op(tree_op_kind::set_size, f, size, durable ? 1 : 0).err;
  }

  // One op on file f; err EIO when the server went away.
  tree_op file_op(tree_op_kind k, const tree_file& f, uint64_t size = 0, uint32_t flags = 0) {
    return ask(call_of(k, f.id, 0, size, flags));
  }

  int do_close(gfs_slot& q, after_lock& later) {
    open_file* o = lookup(q.a0);
    // Every user left is closing already: a close too many (a handle closed
    // twice) must not take a pending close's reference.
    if (!o || o->refs == o->closing) return EBADF;
    if ((q.flags & 3) == 3 && o->file->writable) {  // written, write-backs submitted: finished by the closer
      const uint64_t timeout = opts.timeout_ns ? opts.timeout_ns : cache->config().timeout_ns;
      later.deferred = (q.flags & 4) != 0;  // gclose: replied to once its writes have landed
      {
        std::lock_guard<std::mutex> lock(pending_mutex);
        pending.push_back({uint32_t(q.a0), o->window, uint32_t(q.a2), q.a1, now_ns() + timeout,
                           later.deferred ? int32_t(&q - slots) : -1, q.ticket});
      }
      ++o->closing;
      pending_cv.notify_all();
      ++later.n.closes;
      ++later.n.closes_pending;
      return 0;
    }
    int err = 0;
    if ((q.flags & 1) && o->file->writable) err = set_size(*o->file, q.a1, false);
    // The closing warp clears the tag itself when told the entry is freed.
    drop_user(uint32_t(q.a0), *o, &q.r0, later);
    ++later.n.closes;
    return err;
  }

  // One user of table entry h closed it; the last one's close frees the
  // entry (under `state`). freed: the close's reply, told that it did (set
  // to 1): that warp clears the entry's tag (gfs_ref::kill_handles), and
  // the entry is free at once. With none (a close the closer thread
  // finished), the host clears the tag (in `later`, a copy not waited for)
  // and frees the entry after it. A stale gfile stops matching once the
  // tag is cleared, or once the entry's next opener writes its own (a new
  // generation); a warp whose gclose timed out keeps matching until then.
  void drop_user(uint32_t h, open_file& fo, uint64_t* freed, after_lock& later) {
    open_file* o = &fo;
    if (--o->refs == 0) {
      // The window is kept for a reopen of the file unchanged since: as it
      // was at open if nobody wrote it (a change by the host meanwhile then
      // rightly costs the window: its cached pages may predate it), else as
      // it is now, with the GPU's writes. A write-once file's cached pages
      // may lack bytes that are in the file (zeros where a page written
      // back was evicted and written again): its window is never reused.
      if (!o->had_writer) {
        retained[{o->dev, o->ino}] = {o->window, o->mtime_ns, o->ctime_ns, o->size};
      } else if (!o->file->write_once) {
        const tree_op st = file_op(tree_op_kind::stat, *o->file);
        if (!st.err) retained[{o->dev, o->ino}] = {o->window, st.st.mtime_ns, st.st.ctime_ns, st.st.size};
      }
      later.detach = o->window;  // after the lock, if this file is still the one attached
      by_inode.erase({o->dev, o->ino});
      later.file = std::move(o->file);
      table[h].reset();
      if (freed) {
        *freed = 1;
        clear_ticket[h] = 0;
        free_fds.push_back(h);
      } else {
        later.clear = h;
      }
      --later.n.open_files;
    }
  }

  // The closer thread: finishes gclose_async's closes as their writes land.
  void close_in_background() {
    std::unique_lock<std::mutex> lock(pending_mutex);
    for (uint32_t idle = 0;;) {
      if (pending.empty()) {
        if (closer_stop) return;
        pending_cv.wait_for(lock, std::chrono::milliseconds(50));
        continue;
      }
      // The windows' counts, asked outside the lock (under a server, a
      // message): only this thread takes entries out of `pending`, so its
      // first `asked` entries are still there when it looks again.
      const size_t asked = pending.size();
      std::vector<uint32_t> windows(asked);
      for (size_t i = 0; i < asked; ++i) windows[i] = pending[i].window;
      lock.unlock();
      std::vector<uint32_t> done = writes_done(windows);
      lock.lock();
      std::vector<pending_close> ready;
      const uint64_t now = now_ns();
      for (size_t i = asked; i-- > 0;) {
        const pending_close& p = pending[i];
        if (int32_t(done[i] - p.started) >= 0 || now >= p.deadline_ns) {
          ready.push_back(p);
          pending.erase(pending.begin() + std::ptrdiff_t(i));
        }
      }
      if (ready.empty()) {
        // Writes in flight: a page's write takes tens of microseconds or more.
        lock.unlock();
        if (++idle < 64)
          spin_pause();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        lock.lock();
        continue;
      }
      idle = 0;
      lock.unlock();
      // In parallel (up to 8 threads): each close's fstat and truncate.
      const size_t n = ready.size(), workers = std::min<size_t>(8, n);
      if (workers <= 1) {
        finish_close(ready[0]);
      } else {
        std::vector<std::thread> pool;
        for (size_t k = 0; k < workers; ++k)
          pool.emplace_back([&, k] {
            for (size_t i = k; i < n; i += workers) finish_close(ready[i]);
          });
        for (std::thread& t : pool) t.join();
      }
      lock.lock();
      pending_cv.notify_all();  // sync() waits for pending to empty
    }
  }

  // Each window's writes_done (0 where the server went away: its closes
  // then end at their deadline).
  std::vector<uint32_t> writes_done(const std::vector<uint32_t>& windows) {
    std::vector<tree_call> calls;
    calls.reserve(windows.size());
    for (uint32_t w : windows) calls.push_back(call_of(tree_op_kind::writes_done, 0, w));
    run_tree(*tree, calls.data(), calls.size());
    std::vector<uint32_t> out(windows.size());
    for (size_t i = 0; i < windows.size(); ++i) out[i] = calls[i].op.value;
    return out;
  }

  void finish_close(const pending_close& p) {
    std::shared_ptr<tree_file> file;
    {
      std::lock_guard<std::mutex> tables(state);
      file = table[p.h]->file;  // the close's reference keeps the entry
    }
    int err = 0;
    std::string what;
    if (int32_t(writes_done({p.window})[0] - p.started) < 0) {
      err = ETIMEDOUT;
      what = "its pages' write-backs did not all complete before the deadline";
    } else if (const int e = int(file_op(tree_op_kind::write_error, *file).value)) {
      err = e;
      what = "a write-back failed";
    } else if (const int e = set_size(*file, p.size, false)) {
      err = e;
      what = "setting its size";
    }
    after_lock later;
    {
      std::lock_guard<std::mutex> tables(state);
      --table[p.h]->closing;
      drop_user(p.h, *table[p.h], nullptr, later);
    }
    finish(later);
    // The error and the counts first, then the close counts as finished
    // (sync() waits for closes_pending to reach 0, then reads the error),
    // then the reply: whoever learns the close is done sees all of it.
    if (err && p.reply < 0) {
      std::lock_guard<std::mutex> lock(pending_mutex);
      if (background_error.empty())
        background_error = "the background close of " + file->path + " failed: " + what + ": " + std::strerror(err);
    }
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      add(later.n);
      --st.closes_pending;
      if (p.reply < 0) {
        ++st.background_closes;
        if (err) ++st.background_close_errors;
      }
    }
    if (p.reply >= 0) {  // a gclose: its warp hears of the error itself
      gfs_slot& q = slots[p.reply];
      q.err = err;
      q.r0 = 0;  // the host clears the entry's tag (finish, above)
      shared_store_release(&q.done, p.ticket);
    }
  }

  int do_truncate(gfs_slot& q) {
    open_file* o = lookup(q.a0);
    if (!o || !o->file->writable) return EBADF;
    return file_op(tree_op_kind::truncate, *o->file, q.a1).err;  // the next Flush (gfsync, gclose) makes it durable
  }

  int do_sync_size(gfs_slot& q) {
    open_file* o = lookup(q.a0);
    if (!o) return EBADF;
    return o->file->writable ? set_size(*o->file, q.a1, true) : 0;
  }

  // Directories: the tree's (under the tables' lock: they are rare).
  tree_op dir_op(tree_op_kind k, uint64_t dir, std::string path, std::string* name = nullptr) {
    tree_call c = call_of(k, dir);
    c.path = std::move(path);
    c.op.path_bytes = uint32_t(c.path.size());
    return ask(std::move(c), name);
  }

  int do_opendir(gfs_slot& q, after_lock& later) {
    if (free_dirs.empty()) return EMFILE;
    const tree_op r = dir_op(tree_op_kind::opendir, 0, text_of(q));
    if (r.err) return r.err;
    const uint32_t id = free_dirs.back();
    free_dirs.pop_back();
    dirs[id] = r.id;
    q.r0 = id;
    ++later.n.open_dirs_up;
    return 0;
  }

  int do_readdir(gfs_slot& q) {
    const uint64_t id = q.a0;
    if (id >= dirs.size() || !dirs[id]) return EBADF;
    std::string name;
    const tree_op r = dir_op(tree_op_kind::readdir, dirs[id], {}, &name);
    q.len = 0;
    if (r.err || !r.id) return r.err;  // 0 at the end
    const size_t n = std::min<size_t>(name.size(), gfs_name_max - 1);
    std::memcpy(q.text, name.data(), n);
    q.len = uint32_t(n);
    q.r0 = 1;
    q.r1 = r.value;
    return 0;
  }

  int do_closedir(gfs_slot& q, after_lock& later) {
    const uint64_t id = q.a0;
    if (id >= dirs.size() || !dirs[id]) return EBADF;
    (void)dir_op(tree_op_kind::closedir, dirs[id], {});
    dirs[id] = 0;
    free_dirs.push_back(uint32_t(id));
    ++later.n.open_dirs_down;
    return 0;
  }
};

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
  p.next_window = std::max(p.tree->first_window(), window_watermark(*p.cache, p.tree->nsid()));
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
