// The file API's host side (files/file_system.hpp), as its parts share
// it: the state of a file_system (file_system::impl) and what each part
// defines. A part a job:
//   file_system.cpp  the object: options checked, the tree session opened,
//                    client memory laid out, the threads started and
//                    stopped; stats() and sync()
//   service.cpp      the service threads: the slots found waiting, answered
//                    a batch at a time around one hold of the tables' lock;
//                    the ops sent to the tree session (a thread's detaches
//                    and closes held back for its next message)
//   open_table.cpp   the open-file and directory tables: opens, closes,
//                    truncates, sizes, directories
//   closer.cpp       the closer thread: closes of written files finished
//                    once their write-backs have landed
//   windows.cpp      which window a file reads through, which windows keep
//                    their pages, and the windows' direct tiers
// Path resolution is the tree's side (src/targets/local_tree.cpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "deepwell/files/file_system.hpp"
#include "deepwell/protocol/tree.hpp"
#include "deepwell/views/array.hpp"
#include "direct_map.hpp"

namespace deepwell {

struct file_system::impl {
  // A file as the tree session holds it: its id there, closed when the
  // last reference here goes (a request in flight keeps the session's own).
  struct tree_file {
    tree_session* tree = nullptr;
    uint64_t id = 0;
    std::string path;  // relative to the root, for messages
    bool writable = false;
    bool direct = false;      // read with O_DIRECT
    bool write_once = false;  // g_gwronce
    ~tree_file();
  };

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

  // Requests a service thread answers together (serve).
  static constexpr uint32_t max_batch = 32;
  struct batch {
    uint32_t n = 0;
    uint32_t slot[max_batch], ticket[max_batch];
    uint64_t seen_ns = 0, pass_ns = 0;  // when the pass found them; its length
    open_prep prep[max_batch];
    after_lock later[max_batch];
    std::vector<tree_call> deferred;  // finish()'s tree ops, sent together
  };

  impl(std::shared_ptr<page_cache> pc, const file_system_options& o, std::unique_ptr<client_memory> m);
  ~impl();

  // ---- ops to the tree session (service.cpp) ----
  static tree_call call_of(tree_op_kind k, uint64_t file = 0, uint32_t window = 0, uint64_t size = 0,
                           uint32_t flags = 0) {
    tree_call c;
    c.op.kind = uint32_t(k);
    c.op.file = file;
    c.op.window = window;
    c.op.size = size;
    c.op.flags = flags;
    return c;
  }
  static bool run_tree(tree_session& t, tree_call* calls, size_t n);
  static void run_or_defer(tree_session& t, tree_call c);
  void run_deferred(std::vector<tree_call>& ops);
  tree_op ask(tree_call c, std::string* name = nullptr);

  // ---- the service threads (service.cpp) ----
  void run(uint32_t k, uint32_t n);
  void serve(batch& b);
  static uint64_t idle_spin_ns();
  static uint64_t thread_cpu_ns();

  // ---- the open-file and directory tables (open_table.cpp) ----
  std::string text_of(const gfs_slot& q) const {
    return std::string(q.text, q.len < gfs_path_max ? q.len : gfs_path_max - 1);
  }
  void prepare_opens(batch& b);
  int commit_open(gfs_slot& q, open_prep& p, after_lock& later);
  void finish(after_lock& later);
  open_file* lookup(uint64_t a0);
  int set_size(const tree_file& f, uint64_t size, bool durable);
  tree_op file_op(tree_op_kind k, const tree_file& f, uint64_t size = 0, uint32_t flags = 0);
  int do_close(gfs_slot& q, after_lock& later);
  void drop_user(uint32_t h, open_file& fo, uint64_t* freed, after_lock& later);
  int do_truncate(gfs_slot& q);
  int do_sync_size(gfs_slot& q);
  tree_op dir_op(tree_op_kind k, uint64_t dir, std::string path, std::string* name = nullptr);
  int do_opendir(gfs_slot& q, after_lock& later);
  int do_readdir(gfs_slot& q);
  int do_closedir(gfs_slot& q, after_lock& later);

  // ---- the closer thread (closer.cpp) ----
  void close_in_background();
  std::vector<uint32_t> writes_done(const std::vector<uint32_t>& windows);
  void finish_close(const pending_close& p);

  // ---- windows and their direct tiers (windows.cpp) ----
  static uint32_t window_watermark(const page_cache& cache, uint32_t nsid);
  static void raise_window_watermark(const page_cache& cache, uint32_t nsid, uint32_t next);
  int attach_window(uint32_t w, const tree_file& f);
  void detach_window(uint32_t w, const tree_file* only);
  static bool unchanged(const retained_window& r, const tree_stat& sb) {
    return r.mtime_ns == sb.mtime_ns && r.ctime_ns == sb.ctime_ns && r.size == sb.size;
  }
  std::optional<detail::direct_map> make_direct(int fd, const tree_stat& sb, bool& maker);
  bool use_direct(uint32_t w, std::optional<detail::direct_map>& made, after_lock& later);
  void release_direct();
  void drop_direct(uint32_t w, after_lock& later);
};

}  // namespace deepwell
