// The file API's open-file and directory tables (file_system_impl.hpp):
// opens (their tree calls before the tables' lock, the rest under it),
// closes, truncates and sizes, directories, and what a request leaves for
// after the lock.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "file_system_impl.hpp"

namespace deepwell {

// The opens' work before the tables' lock: their checks, then the
// tree's opens of the batch in one go (in this process, system calls
// several service threads make at once; under a server, one message),
// then the direct tiers' registrations. Each open's errno in its prep.
void file_system::impl::prepare_opens(batch& b) {
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
int file_system::impl::commit_open(gfs_slot& q, open_prep& p, after_lock& later) {
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

void file_system::impl::finish(after_lock& later) {
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

file_system::impl::open_file* file_system::impl::lookup(uint64_t a0) {
  const uint32_t h = uint32_t(a0), tag = uint32_t(a0 >> 32);
  if (h >= table.size() || !table[h] || table[h]->tag != tag) return nullptr;
  return &*table[h];
}

// The file on disk gets the size the GPU sees (page write-backs may have
// written past it); durably for gfsync and sync(), whose callers have
// just persisted the file's pages (write-back, then the window target's
// fdatasync), so an fsync is needed only when the size changes here. A
// close is not durable, as POSIX's is not: gfsync is.
int file_system::impl::set_size(const tree_file& f, uint64_t size, bool durable) {
  return file_op(tree_op_kind::set_size, f, size, durable ? 1 : 0).err;
}

// One op on file f; err EIO when the server went away.
tree_op file_system::impl::file_op(tree_op_kind k, const tree_file& f, uint64_t size, uint32_t flags) {
  return ask(call_of(k, f.id, 0, size, flags));
}

int file_system::impl::do_close(gfs_slot& q, after_lock& later) {
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
void file_system::impl::drop_user(uint32_t h, open_file& fo, uint64_t* freed, after_lock& later) {
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

int file_system::impl::do_truncate(gfs_slot& q) {
  open_file* o = lookup(q.a0);
  if (!o || !o->file->writable) return EBADF;
  return file_op(tree_op_kind::truncate, *o->file, q.a1).err;  // the next Flush (gfsync, gclose) makes it durable
}

int file_system::impl::do_sync_size(gfs_slot& q) {
  open_file* o = lookup(q.a0);
  if (!o) return EBADF;
  return o->file->writable ? set_size(*o->file, q.a1, true) : 0;
}

// Directories: the tree's (under the tables' lock: they are rare).
tree_op file_system::impl::dir_op(tree_op_kind k, uint64_t dir, std::string path, std::string* name) {
  tree_call c = call_of(k, dir);
  c.path = std::move(path);
  c.op.path_bytes = uint32_t(c.path.size());
  return ask(std::move(c), name);
}

int file_system::impl::do_opendir(gfs_slot& q, after_lock& later) {
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

int file_system::impl::do_readdir(gfs_slot& q) {
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

int file_system::impl::do_closedir(gfs_slot& q, after_lock& later) {
  const uint64_t id = q.a0;
  if (id >= dirs.size() || !dirs[id]) return EBADF;
  (void)dir_op(tree_op_kind::closedir, dirs[id], {});
  dirs[id] = 0;
  free_dirs.push_back(uint32_t(id));
  ++later.n.open_dirs_down;
  return 0;
}

}  // namespace deepwell
