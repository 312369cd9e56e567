// The file API's window target (window_target.hpp).
#include "window_target.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "deepwell/protocol/gfs_layout.hpp"

namespace deepwell::detail {

window_file::~window_file() {
  if (fd >= 0) ::close(fd);
  if (fd >= 0 && quota) quota->give();
  if (merge_budget && merges) {  // its offsets go back to the session's budget
    int64_t kept = 0;
    for (unsigned k = 0; k < merge_stripes; ++k) kept += int64_t(merges[k].written.size());
    merge_budget->fetch_add(kept);
  }
}

namespace {

constexpr uint64_t window_mask = (1ull << gfs_window_shift) - 1;

// One read or write in flight; it holds its file open until it completes.
struct window_request {
  std::shared_ptr<window_file> file;
  io_engine* io = nullptr;
  char* buf = nullptr;
  uint64_t offset = 0;  // in the file
  uint32_t len = 0;
  uint32_t done_bytes = 0;
  bool is_write = false;
  int rw_flags = 0;
  io_callback done;
  std::atomic<uint32_t>* counted = nullptr;  // a write: its window's writes_done, raised when it ends
  std::shared_ptr<std::atomic<uint32_t>[]> counts;  // keeps `counted` alive across a reset()
};

void issue(window_request* r);

void on_done(void* ctx, int64_t result) {
  auto* r = static_cast<window_request*>(ctx);
  auto finish = [r](int64_t v) {
    // Marked on completion: a Flush covers writes completed before it.
    if (r->is_write && v >= 0) r->file->written.store(true);
    if (r->is_write && v < 0) {
      int none = 0;
      r->file->write_error.compare_exchange_strong(none, int(-v));
    }
    const io_callback d = r->done;
    std::atomic<uint32_t>* counted = r->counted;
    delete r;
    if (counted) counted->fetch_add(1, std::memory_order_release);
    d(v);
  };
  if (result == -EINTR || result == -EAGAIN) return issue(r);
  if (result < 0) return finish(result);
  if (result == 0) {
    if (r->is_write) return finish(-EIO);
    // The end of the file: the rest of the page reads as zeros.
    std::memset(r->buf + r->done_bytes, 0, r->len - r->done_bytes);
    return finish(r->len);
  }
  r->done_bytes += uint32_t(result);
  if (r->done_bytes >= r->len) return finish(r->len);
  if (r->file->direct && !r->is_write) {
    // O_DIRECT reads stop short only at the end of the file (and may not
    // go on from an unaligned offset): the rest reads as zeros.
    std::memset(r->buf + r->done_bytes, 0, r->len - r->done_bytes);
    return finish(r->len);
  }
  issue(r);
}

void issue(window_request* r) {
  io_op op;
  op.kind = r->is_write ? io_op::write : io_op::read;
  op.fd = r->file->fd;
  op.buf = r->buf + r->done_bytes;
  op.len = r->len - r->done_bytes;
  op.offset = r->offset + r->done_bytes;
  op.rw_flags = r->rw_flags;
  op.done = {&on_done, r};
  r->io->queue(op);
}

// Several fsyncs, one completion: the first error, else 0.
struct flush_group {
  unsigned left = 0;
  int64_t first_error = 0;
  io_callback done;
  std::vector<std::shared_ptr<window_file>> files;
};

void on_fsync(void* ctx, int64_t result) {
  auto* g = static_cast<flush_group*>(ctx);
  if (result < 0 && g->first_error == 0) g->first_error = result;
  if (--g->left) return;
  const io_callback d = g->done;
  const int64_t v = g->first_error;
  delete g;
  d(v);
}

// All of p written at offset; len or -errno.
int64_t put_all(int fd, const uint8_t* p, uint32_t len, uint64_t offset) {
  for (uint32_t put = 0; put < len;) {
    const ssize_t n = ::pwrite(fd, p + put, len - put, off_t(offset + put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO;
    put += uint32_t(n);
  }
  return len;
}

// A write-once file's page comes from a cache that never read it: zeros
// wherever this writer did not write. Bytes already in the file (written
// back before the page was evicted and written again) are kept by OR-ing
// them in: writers write each byte once, so the bytes never overlap. The
// file was created or emptied at open and nobody else writes it, so a page
// never written back before has nothing to keep: it is written as it is.
// On the poller's thread, under the page's stripe lock: a merge's read and
// write must not interleave with another merge of the same page.
int64_t merge_write_once(window_file& f, const uint8_t* buf, uint32_t len, uint64_t offset, bool fua) {
  // Offsets are page-aligned: mixed, so that every stripe gets pages.
  window_file::merge_stripe& stripe = f.merges[((offset >> 9) * 0x9E3779B97F4A7C15ull) >> 58];
  std::lock_guard<std::mutex> lock(stripe.mutex);
  int64_t v;
  // Kept in the set even if the write fails: part of it may have landed.
  if (!stripe.written.count(offset) && f.merge_budget && f.merge_budget->fetch_sub(1) <= 0) {
    f.merge_budget->fetch_add(1);
    return -ENOSPC;
  }
  if (stripe.written.insert(offset).second) {
    v = put_all(f.fd, buf, len, offset);
  } else {
    std::vector<uint8_t> page(buf, buf + len);
    for (uint32_t got = 0; got < len;) {
      const ssize_t n = ::pread(f.fd, page.data() + got, len - got, off_t(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) break;  // past the end of the file: nothing to keep
      for (ssize_t i = 0; i < n; ++i) page[got + i] = uint8_t(page[got + i] | buf[got + i]);
      got += uint32_t(n);
    }
    v = put_all(f.fd, page.data(), len, offset);
  }
  if (v < 0) return v;
  if (fua && ::fdatasync(f.fd) != 0) return -errno;
  f.written.store(true);
  return len;
}

}  // namespace

bool window_target::attach(uint32_t window, std::shared_ptr<window_file> f) {
  std::shared_ptr<window_file> gone;  // a file it replaces: its last reference dropped outside the lock
  shard& s = shard_of(window);
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<window_file>& slot = s.windows[window];
  const bool fresh = !slot;
  gone = std::move(slot);
  slot = std::move(f);
  return fresh;
}

bool window_target::detach(uint32_t window, const window_file* only) {
  std::shared_ptr<window_file> gone;  // its last reference dropped (a close(2)) outside the lock
  shard& s = shard_of(window);
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.windows.find(window);
  if (it == s.windows.end() || (only && it->second.get() != only)) return false;
  gone = std::move(it->second);
  s.windows.erase(it);
  return true;
}

void window_target::reset(std::string root) {
  std::vector<std::shared_ptr<window_file>> gone;  // closed outside the locks
  std::vector<std::unique_lock<std::mutex>> locks;
  for (uint32_t k = 0; k < shards; ++k) locks.emplace_back(shards_[k].mutex);
  for (uint32_t k = 0; k < shards; ++k) {
    for (auto& [w, f] : shards_[k].windows) gone.push_back(std::move(f));
    shards_[k].windows.clear();
  }
  writes_done_.store(fresh_counts());
  root_ = std::move(root);
}

std::shared_ptr<window_file> window_target::find(uint64_t offset) const {
  const uint32_t window = uint32_t(offset >> gfs_window_shift);
  const shard& s = shard_of(window);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.windows.find(window);
  return it == s.windows.end() ? nullptr : it->second;
}

void window_target::read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) {
  if (len == 0) return done(0);
  std::shared_ptr<window_file> f = find(offset);
  if (!f) return done(-EBADF);
  auto* r = new window_request{std::move(f), &io, static_cast<char*>(buf), offset & window_mask, len, 0, false, 0, done, nullptr, nullptr};
  issue(r);
}

void window_target::write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) {
  const uint32_t window = uint32_t(offset >> gfs_window_shift);
  counts kept = writes_done_.load();
  std::atomic<uint32_t>* counted = window < windows() ? &kept[window] : nullptr;
  // Every write is counted as it ends, failed ones too (whoever waits for
  // the count learns of the failure from the cache's error).
  auto end = [&](int64_t v) {
    if (counted) counted->fetch_add(1, std::memory_order_release);
    done(v);
  };
  if (len == 0) return end(0);
  std::shared_ptr<window_file> f = find(offset);
  if (!f) return end(-EBADF);
  if (!f->writable) return end(-EBADF);
  if (f->write_once) {
    const int64_t v = merge_write_once(*f, static_cast<const uint8_t*>(buf), len, offset & window_mask, fua);
    int none = 0;
    if (v < 0) f->write_error.compare_exchange_strong(none, int(-v));
    return end(v);
  }
  auto* r = new window_request{std::move(f), &io, static_cast<char*>(const_cast<void*>(buf)), offset & window_mask,
                               len, 0, true, fua ? RWF_DSYNC : 0, done, counted, std::move(kept)};
  issue(r);
}

void window_target::flush(io_engine& io, io_callback done) {
  auto* g = new flush_group;
  for (uint32_t k = 0; k < shards; ++k) {
    std::lock_guard<std::mutex> lock(shards_[k].mutex);
    for (auto& [w, f] : shards_[k].windows)
      if (f->written.exchange(false)) g->files.push_back(f);
  }
  if (g->files.empty()) {
    delete g;
    return done(0);
  }
  g->left = unsigned(g->files.size());
  g->done = done;
  for (auto& f : g->files) {
    io_op op;
    op.kind = io_op::fsync;
    op.fd = f->fd;
    op.done = {&on_fsync, g};
    io.queue(op);
  }
}

}  // namespace deepwell::detail
