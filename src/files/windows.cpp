// The file API's windows (file_system_impl.hpp): the windows a file
// system hands out in its namespace (never one a cache may still hold
// pages of), a file's window attached and detached at the window target,
// and the direct tiers of large read-only files, registered while their
// windows may read them and released at sync().
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "file_system_impl.hpp"

namespace deepwell {
namespace {

// Per cache and namespace: one past the windows a file system has handed
// out in it (keyed by the cache's address; a later cache at the same
// address only starts higher).
std::mutex watermark_mutex;
std::map<std::pair<const page_cache*, uint32_t>, uint32_t> watermarks;

}  // namespace

uint32_t file_system::impl::window_watermark(const page_cache& cache, uint32_t nsid) {
  std::lock_guard<std::mutex> lock(watermark_mutex);
  const auto it = watermarks.find({&cache, nsid});
  return it == watermarks.end() ? 0 : it->second;
}

void file_system::impl::raise_window_watermark(const page_cache& cache, uint32_t nsid, uint32_t next) {
  std::lock_guard<std::mutex> lock(watermark_mutex);
  uint32_t& w = watermarks[{&cache, nsid}];
  w = std::max(w, next);
}

// The window target's table has a lock of its own, which the pollers take
// for every read: its attach and detach are timed with profile_service.
// Returns 0 or an errno (EIO: the server went away).
int file_system::impl::attach_window(uint32_t w, const tree_file& f) {
  const uint64_t t = opts.profile_service ? now_ns() : 0;
  const int err = ask(call_of(tree_op_kind::attach, f.id, w)).err;
  if (t) window_target_ns.fetch_add(now_ns() - t, std::memory_order_relaxed);
  return err;
}
void file_system::impl::detach_window(uint32_t w, const tree_file* only) {
  const uint64_t t = opts.profile_service ? now_ns() : 0;
  run_or_defer(*tree, call_of(tree_op_kind::detach, only ? only->id : 0, w));
  if (t) window_target_ns.fetch_add(now_ns() - t, std::memory_order_relaxed);
}

// A direct tier for the file open as fd, unless it has one (open, or
// closed unchanged with its registration kept), another open is making
// one, a writer has it open, or the budget is spent. maker: set when this
// open entered the file in `making` (commit_open takes it out).
std::optional<detail::direct_map> file_system::impl::make_direct(int fd, const tree_stat& sb, bool& maker) {
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
bool file_system::impl::use_direct(uint32_t w, std::optional<detail::direct_map>& made, after_lock& later) {
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
void file_system::impl::release_direct() {
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
void file_system::impl::drop_direct(uint32_t w, after_lock& later) {
  const auto it = window_maps.find(w);
  if (it == window_maps.end()) return;
  orphan_maps.push_back(it->second);
  window_maps.erase(it);
  later.window = w;
  later.source = {};
}

}  // namespace deepwell
