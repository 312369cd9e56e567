// gfs_ref: the file API as kernels (and CPU threads) call it, by value, as
// array_ref. Calls are collective over the converged lanes of a warp, with
// the same arguments in every lane (GPUfs's rule, per warp instead of per
// block); the `this_thread_warp` overloads serve code that calls them from
// one thread of a warp at a time or from CPU threads.
//
//   __global__ void count_lines(deepwell::gfs_ref fs, const char* path, unsigned long long* out) {
//     deepwell::gpu_warp w;
//     deepwell::gfile f = fs.gopen(w, path, deepwell::g_rdonly);
//     if (!f.ok()) return;                       // f.err is the errno
//     __shared__ char buf[4096];
//     for (uint64_t off = 0;; off += sizeof buf) {
//       int64_t n = fs.gread(w, f, off, buf, sizeof buf);
//       if (n <= 0) break;                       // end of file, or -errno
//       ...
//     }
//     fs.gclose(w, f);
//   }
//
// Bytes move through the page cache (a file's pages are cached like an
// array's); names, permissions and sizes on disk are the host's business,
// asked through request slots the host's file service polls
// (files/file_system.hpp). Results: byte counts, or a negative errno.
#pragma once
#include <cstdint>

#include "deepwell/common/warp.hpp"
#include "deepwell/files/slot_queue.hpp"
#include "deepwell/protocol/gfs_layout.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell {

// A page of a file, pinned while mapped (gmmap). Reads through data();
// writes through write() mark the page dirty (written back on gmsync,
// gclose of a writable file, or eviction). Bytes past length() are not in
// the file.
struct gmapping {
  page_handle<uint8_t> page;
  uint64_t offset = 0;    // the file offset of data()[0]
  uint32_t length = 0;    // bytes of the file in this page from offset
  int32_t err = 9;        // 0, or an errno
  DW_HD bool ok() const { return err == 0; }
  DW_HD const uint8_t* data() const { return page.data(); }
  DW_HD void write(uint32_t i, uint8_t v) { page.write(page.first() + i, v); }
};

class gfs_ref {
 public:
  array_ref<uint8_t> bytes{};        // the window namespace
  gfs_slot* slots = nullptr;         // host memory, as clients address it
  slot_queue_ref free_slots{};       // client memory: the free slots, and the callers waiting for one
  gfs_open_entry* files = nullptr;   // client memory, the open-file table
  uint32_t max_open = 0;
  const uint8_t* zeros = nullptr;    // client memory: a page of zeros (gftruncate)
  uint32_t* write_counts = nullptr;  // client memory: write-backs submitted per window (dataset_desc::write_counts)
  uint32_t zeros_bytes = 0;
  uint64_t timeout_ns = 0;
  // With file_system_options::profile_service (client memory, else null):
  // the calls' round trips as the clients see them, summed: [0] calls,
  // [1] ns taking a slot, [2] ns from the request to seeing its reply,
  // [3] ns reading the reply and freeing the slot, [4] looks at its queue
  // cell while waiting for a slot, [5] calls that found no slot free.
  uint64_t* call_ns = nullptr;
  uint32_t reply_poll_ns = 0;  // GPU: the longest sleep between polls for a reply (0: backoff()'s)

  DW_HD static uint64_t base(uint32_t window) { return uint64_t(window) << gfs_window_shift; }
  DW_HD static constexpr uint64_t max_file_bytes() { return 1ull << gfs_window_shift; }

  // ---- open and close ----

  // path: relative to the file system's root, NUL-terminated. flags: g_*.
  template <class Warp>
  DW_HD gfile gopen(const Warp& w, const char* path, uint32_t flags) const {
    const unsigned mask = w.active();
    const bool leader = w.lane() == lowest_lane(mask);
    const uint32_t len = path_length(w, mask, path);
    gfile f;
    f.flags = flags;
    if (!path || len == 0) {
      f.err = 2;  // ENOENT
      return f;
    }
    if (len >= gfs_path_max) {
      f.err = 36;  // ENAMETOOLONG
      return f;
    }
    const reply r = call(w, mask, gfs_op::open, flags, 0, 0, path, len, nullptr, 0);
    f.err = r.err;
    if (r.err) return f;
    f.fd = int32_t(r.r0);
    f.tag = uint32_t(r.r0 >> 32);
    f.window = gfs_tag_window(f.tag);
    f.mode = uint32_t(r.r2);
    f.mtime_ns = int64_t(r.r3);
    // r.r2 >> 32: 1 if this open made the entry (its first user): fill it
    // and publish the window; other openers wait to see it published.
    // The warp waits together, deciding each round from the leader's look
    // (see call()).
    const unsigned src = lowest_lane(mask);
    gfs_open_entry& e = files[f.fd];
    if (r.r2 >> 32) {
      if (leader) {
        client_atomic<unsigned long long>(e.size).store(r.r1, memory_order_relaxed);
        client_atomic<uint32_t>(e.written).store(0, memory_order_relaxed);
        client_atomic<uint32_t>(e.flags).store(flags, memory_order_relaxed);
        client_atomic<uint32_t>(e.tag).store(f.tag, memory_order_release);
      }
      w.sync(mask);
      return f;
    }
    const uint64_t dl = now_ns() + timeout_ns;
    for (uint32_t i = 0;; ++i) {
      int32_t seen = 0;  // 1: published; -1: past the deadline
      if (leader)
        seen = client_atomic<uint32_t>(e.tag).load(memory_order_acquire) == f.tag ? 1 : now_ns() > dl ? -1 : 0;
      seen = int32_t(w.shfl(mask, uint32_t(seen), src));
      if (seen > 0) return f;
      if (seen < 0) {
        f.err = 110;  // ETIMEDOUT
        return f;
      }
      backoff(i);
    }
  }

  // A written file's dirty pages are written back to the file first, and
  // the file gets its size (close-to-open: the host and other programs see
  // the writes once gclose returns). Not durable, as POSIX's close is not:
  // gfsync makes a file durable. The warp submits every write-back, then
  // the host answers the close once they have all landed (the window's
  // write count) and the size is set. Returns 0 or -errno.
  template <class Warp>
  DW_HD int gclose(const Warp& w, const gfile& f) const {
    return close_file(w, f, true);
  }

  // gclose without the wait: the file's dirty pages have their write-backs
  // submitted, not waited for, and the host finishes the close (the file's
  // size, the window's release) once every write-back of the window
  // submitted so far has landed. Returns 0 or -errno once the host has
  // taken the close (a round trip, no I/O). The host and other programs see
  // the writes after file_system::sync() (which waits for such closes and
  // reports their errors) or once stats().closes_pending is 0; this
  // program's later gopen of the file sees them at once (the same cache).
  // A gopen with g_trunc or g_gwronce meanwhile gets EBUSY.
  template <class Warp>
  DW_HD int gclose_async(const Warp& w, const gfile& f) const {
    return close_file(w, f, false);
  }

  // ---- bytes ----

  // Starts fetching the file's pages that hold [offset, offset + n) and
  // returns without waiting (posix_fadvise's POSIX_FADV_WILLNEED): the
  // warp's later greads find them cached or on their way. A page per lane
  // in turn; pages already cached or coming cost a lookup. Returns 0 or
  // -errno (EBADF: not open, or opened write-only).
  template <class Warp>
  DW_HD int gprefetch(const Warp& w, const gfile& f, uint64_t offset, uint64_t n) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    if (!f.readable()) return -9;
    if (offset >= size || n == 0) return 0;
    const uint64_t end = n < size - offset ? offset + n : size;
    const uint32_t shift = bytes.cache.page_shift();
    const uint64_t first = offset >> shift, last = (end - 1) >> shift;
    const uint32_t lanes = popcount32(mask), rank = lane_rank(w, mask);
    for (uint64_t p = first + rank; p <= last; p += lanes) bytes.prefetch(base(f.window) + (p << shift));
    w.sync(mask);
    return 0;
  }

  // Up to n bytes at `offset` into dst; returns the bytes read (0 at or past
  // the end of the file) or -errno. dst is the warp's: shared or global
  // memory, not one thread's stack (-EFAULT when more than one lane calls).
  template <class Warp>
  DW_HD int64_t gread(const Warp& w, const gfile& f, uint64_t offset, void* dst, uint64_t n) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    if (one_lanes_memory(mask, dst)) return -14;  // EFAULT
    if (!f.readable()) return -9;                 // EBADF: opened write-only
    if (offset >= size || n == 0) return 0;
    const uint64_t m = n < size - offset ? n : size - offset;
    const request_status s = bytes.read_range(w, static_cast<uint8_t*>(dst), base(f.window) + offset, m);
    return s.ok() ? int64_t(m) : -errno_of(s);
  }

  // n bytes from src at `offset`, growing the file if they reach past its
  // end; returns n or -errno (EBADF: not opened for writing; EFBIG: past
  // max_file_bytes()).
  template <class Warp>
  DW_HD int64_t gwrite(const Warp& w, const gfile& f, uint64_t offset, const void* src, uint64_t n) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    if (one_lanes_memory(mask, src)) return -14;  // EFAULT
    if (!f.writable()) return -9;  // EBADF
    if (offset > max_file_bytes() || n > max_file_bytes() - offset) return -27;  // EFBIG
    if (n == 0) return 0;
    // A write-once file's pages are never read first (g_gwronce).
    const request_status s =
        f.write_once() ? bytes.write_range_unread(w, static_cast<const uint8_t*>(src), base(f.window) + offset, n)
                       : bytes.write_range(w, static_cast<const uint8_t*>(src), base(f.window) + offset, n);
    if (!s.ok()) return -errno_of(s);
    if (f.write_once()) {
      // Write-behind: a write-once page this call covered whole is final
      // (each byte is written once), so its write-back starts now instead
      // of at the close, overlapping the program's work. Pages it covered
      // in part wait for their other writers. The write itself is done:
      // a write-back that could not start leaves its page dirty, and the
      // close writes it (and reports what fails then).
      const uint64_t page = bytes.cache.page_size(), from = base(f.window) + offset;
      const uint64_t first = (from + page - 1) / page, end = (from + n) / page;  // [first, end) whole
      if (first < end) (void)bytes.cache.start_write_back(w, bytes.dataset, first, end - 1);
    }
    if (w.lane() == lowest_lane(mask)) {
      gfs_open_entry& e = files[f.fd];
      client_atomic<uint32_t>(e.written).store(1, memory_order_relaxed);
      client_atomic<unsigned long long> sz(e.size);
      unsigned long long cur = sz.load(memory_order_relaxed);
      while (cur < offset + n && !sz.compare_exchange_weak(cur, offset + n, memory_order_acq_rel)) {
      }
    }
    w.sync(mask);
    return int64_t(n);
  }

  template <class Warp>
  DW_HD int gfstat(const Warp& w, const gfile& f, gstat* out) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    if (out && w.lane() == lowest_lane(mask)) {
      out->size = size;
      out->mode = f.mode;
      out->mtime_ns = f.mtime_ns;
    }
    w.sync(mask);
    return 0;
  }

  // Sets the file's size. Shrinking zeroes the cached bytes past the new
  // end first, so that growing it again reads zeros there, as POSIX says.
  template <class Warp>
  DW_HD int gftruncate(const Warp& w, const gfile& f, uint64_t size) const {
    const unsigned mask = w.active();
    const bool leader = w.lane() == lowest_lane(mask);
    uint64_t old = 0;
    const int bad = check(w, mask, f, old);
    if (bad) return bad;
    if (!f.writable()) return -22;  // EINVAL, as ftruncate on a read-only descriptor
    if (size > max_file_bytes()) return -27;
    for (uint64_t at = size; at < old;) {
      const uint64_t page_end = (at / zeros_bytes + 1) * zeros_bytes;
      const uint64_t end = page_end < old ? page_end : old;
      const request_status s = bytes.write_range(w, zeros, base(f.window) + at, end - at);
      if (!s.ok()) return -errno_of(s);
      at = end;
    }
    const reply r = call(w, mask, gfs_op::truncate, 0, uint64_t(f.tag) << 32 | uint32_t(f.fd), size,
                         nullptr, 0, nullptr, 0);
    if (r.err) return -r.err;
    if (leader) {
      client_atomic<unsigned long long>(files[f.fd].size).store(size, memory_order_release);
      client_atomic<uint32_t>(files[f.fd].written).store(1, memory_order_relaxed);
    }
    w.sync(mask);
    return 0;
  }

  // The file's writes so far durable: its dirty pages written back, the
  // namespace flushed (fsync of the files written), and its size on disk
  // set to what the GPU sees.
  template <class Warp>
  DW_HD int gfsync(const Warp& w, const gfile& f) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    if (!f.writable()) return 0;
    const int err = persist_range(w, f, size);
    if (err) return err;
    const reply r =
        call(w, mask, gfs_op::sync_size, 0, uint64_t(f.tag) << 32 | uint32_t(f.fd), size, nullptr, 0, nullptr, 0);
    return -r.err;
  }

  // ---- mappings: a page of the file, pinned ----

  template <class Warp>
  DW_HD gmapping gmmap(const Warp& w, const gfile& f, uint64_t offset) const {
    const unsigned mask = w.active();
    gmapping m;
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad || offset >= size || !f.readable()) {
      m.err = bad ? -bad : !f.readable() ? 13 : 22;  // EACCES: opened write-only; EINVAL past the end
      return m;
    }
    const uint64_t page = bytes.cache.page_size();
    const uint64_t start = offset / page * page;
    m.page = bytes.page(w, base(f.window) + start);
    if (!m.page.ok()) {
      m.err = errno_of(m.page.status());
      return m;
    }
    m.offset = start;
    m.length = uint32_t(size - start < page ? size - start : page);
    m.err = 0;
    if (f.writable() && w.lane() == lowest_lane(mask))
      client_atomic<uint32_t>(files[f.fd].written).store(1, memory_order_relaxed);
    return m;
  }
  DW_HD void gmunmap(gmapping& m) const {
    if (m.ok()) m.page.release();
    m.err = 9;
  }
  // The mapping's writes durable (every lane with a mapping, together).
  template <class Warp>
  DW_HD int gmsync(const Warp&, gmapping& m) const {
    const request_status s = m.page.persist();
    return m.ok() ? (s.ok() ? 0 : -errno_of(s)) : -m.err;
  }

  // ---- directories ----

  template <class Warp>
  DW_HD gdir gopendir(const Warp& w, const char* path) const {
    const unsigned mask = w.active();
    const uint32_t len = path_length(w, mask, path);
    gdir d;
    if (!path) return d;
    if (len >= gfs_path_max) {
      d.err = 36;
      return d;
    }
    // "" names the root itself.
    const reply r = call(w, mask, gfs_op::opendir, 0, 0, 0, path, len, nullptr, 0);
    d.err = r.err;
    d.id = r.err ? -1 : int32_t(r.r0);
    return d;
  }
  // The next entry ("." and ".." left out) into *out: 1, 0 at the end, or
  // -errno. The leader lane writes *out; every lane may read it after.
  template <class Warp>
  DW_HD int greaddir(const Warp& w, const gdir& d, gdirent* out) const {
    const unsigned mask = w.active();
    if (!d.ok()) return -9;
    const bool leader = w.lane() == lowest_lane(mask);
    const reply r = call(w, mask, gfs_op::readdir, 0, uint32_t(d.id), 0, nullptr, 0,
                         out ? out->name : nullptr, gfs_name_max);
    if (r.err) return -r.err;
    if (leader && out && r.r0) out->type = uint8_t(r.r1);
    w.sync(mask);
    return r.r0 ? 1 : 0;
  }
  template <class Warp>
  DW_HD int gclosedir(const Warp& w, const gdir& d) const {
    const unsigned mask = w.active();
    if (!d.ok()) return -9;
    const reply r = call(w, mask, gfs_op::closedir, 0, uint32_t(d.id), 0, nullptr, 0, nullptr, 0);
    return -r.err;
  }

  // ---- one thread at a time (CPU threads; GPU code that wants no coalescing) ----
  DW_HD gfile gopen(const char* path, uint32_t flags) const { return gopen(this_thread_warp{}, path, flags); }
  DW_HD int gclose(const gfile& f) const { return gclose(this_thread_warp{}, f); }
  DW_HD int gclose_async(const gfile& f) const { return gclose_async(this_thread_warp{}, f); }
  DW_HD int gprefetch(const gfile& f, uint64_t off, uint64_t n) const { return gprefetch(this_thread_warp{}, f, off, n); }
  DW_HD int64_t gread(const gfile& f, uint64_t off, void* dst, uint64_t n) const {
    return gread(this_thread_warp{}, f, off, dst, n);
  }
  DW_HD int64_t gwrite(const gfile& f, uint64_t off, const void* src, uint64_t n) const {
    return gwrite(this_thread_warp{}, f, off, src, n);
  }

 private:
  struct reply {
    int32_t err = 0;
    uint64_t r0 = 0, r1 = 0, r2 = 0, r3 = 0;
  };

  // gclose (`wait`) and gclose_async. Without write counts (no window
  // target to count write-backs) a written file is persisted here and
  // closed with a plain call, waited for either way.
  template <class Warp>
  DW_HD int close_file(const Warp& w, const gfile& f, bool wait) const {
    const unsigned mask = w.active();
    uint64_t size = 0;
    const int bad = check(w, mask, f, size);
    if (bad) return bad;
    const bool written = f.writable() && load_written(w, mask, f);
    if (written && write_counts) {
      // gclose: closed even if a write-back could not be submitted (the
      // entry is released either way), and that error is the result.
      // gclose_async: such an error is returned at once, nothing closed.
      const int err = start_write_back_range(w, f, size);
      if (err && !wait) return err;
      const reply r = close_after_write_backs(w, mask, f, size, wait);
      return err ? err : -r.err;
    }
    int err = 0;
    if (written) err = persist_range(w, f, size);
    const reply r = call(w, mask, gfs_op::close, written ? 1u : 0u, uint64_t(f.tag) << 32 | uint32_t(f.fd),
                         size, nullptr, 0, nullptr, 0);
    if (!r.err && r.r0 == 1) kill_handles(w, mask, f);
    return err ? err : -r.err;
  }

  DW_HD static int32_t errno_of(const request_status& s) {
    switch (s.code) {
      case client_code::timeout: return 110;           // ETIMEDOUT
      case client_code::cache_exhausted: return 12;    // ENOMEM
      case client_code::out_of_range: return 27;       // EFBIG
      case client_code::read_only: return 9;           // EBADF
      case client_code::invalid_argument: return 22;   // EINVAL
      default: return 5;                               // EIO
    }
  }

  // True for a buffer in a thread's local memory (a variable on its stack)
  // when more than one lane calls: the lanes share the copy, and each would
  // move its part to or from its own stack, so the bytes would be scattered.
  DW_HD static bool one_lanes_memory(unsigned mask, const void* p) {
#ifdef __CUDA_ARCH__
    if ((mask & (mask - 1)) == 0) return false;
    // isspacep.local by hand: nvcc 13's __isLocal broke the LLVM verifier
    // ("call parameter type does not match") once inlined into grep's kernel.
    unsigned local = 0;
    asm("{\n\t.reg .pred p;\n\tisspacep.local p, %1;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(local) : "l"(p));
    return local != 0;
#else
    (void)mask;
    (void)p;
    return false;
#endif
  }

  // strlen(path) capped at gfs_path_max, measured by the leader, the same in every lane.
  template <class Warp>
  DW_HD static uint32_t path_length(const Warp& w, unsigned mask, const char* path) {
    uint32_t len = 0;
    if (w.lane() == lowest_lane(mask) && path)
      while (len < gfs_path_max && path[len]) ++len;
    return w.shfl(mask, len, lowest_lane(mask));
  }

  // The last close of a file: its handles stop matching its entry at once
  // (the host also clears the tag before it hands the entry out again; a
  // CAS, so that a clear that comes late never touches a later file's).
  template <class Warp>
  DW_HD void kill_handles(const Warp& w, unsigned mask, const gfile& f) const {
    if (w.lane() == lowest_lane(mask)) {
      uint32_t expected = f.tag;
      client_atomic<uint32_t>(files[f.fd].tag).compare_exchange_strong(expected, 0u, memory_order_acq_rel);
    }
    w.sync(mask);
  }

  // 0 if f is an open file of this table (its size into `size`, the same
  // in every lane), else -EBADF.
  template <class Warp>
  DW_HD int check(const Warp& w, unsigned mask, const gfile& f, uint64_t& size) const {
    if (!f.ok() || f.fd < 0 || uint32_t(f.fd) >= max_open) return -9;
    uint32_t good = 0;
    if (w.lane() == lowest_lane(mask)) {
      gfs_open_entry& e = files[f.fd];
      good = client_atomic<uint32_t>(e.tag).load(memory_order_acquire) == f.tag;
      size = client_atomic<unsigned long long>(e.size).load(memory_order_acquire);
    }
    good = w.shfl(mask, good, lowest_lane(mask));
    size = shfl64(w, mask, size, lowest_lane(mask));
    return good ? 0 : -9;
  }

  template <class Warp>
  DW_HD bool load_written(const Warp& w, unsigned mask, const gfile& f) const {
    uint32_t v = 0;
    if (w.lane() == lowest_lane(mask)) v = client_atomic<uint32_t>(files[f.fd].written).load(memory_order_acquire);
    return w.shfl(mask, v, lowest_lane(mask)) != 0;
  }

  // Submits the write-backs of the file's dirty pages in [0, size), not
  // waiting for them; 0 or -errno.
  template <class Warp>
  DW_HD int start_write_back_range(const Warp& w, const gfile& f, uint64_t size) const {
    if (size == 0) return 0;
    const uint64_t first = base(f.window) >> bytes.cache.page_shift();
    const request_status s =
        bytes.cache.start_write_back(w, bytes.dataset, first, first + ((size - 1) >> bytes.cache.page_shift()));
    return s.ok() ? 0 : -errno_of(s);
  }

  // The close of a written file whose write-backs this warp has submitted:
  // the host finishes it once the window's target has completed as many
  // writes as the window's count says were submitted now. wait: the reply
  // comes then (gclose); else at once (gclose_async).
  template <class Warp>
  DW_HD reply close_after_write_backs(const Warp& w, unsigned mask, const gfile& f, uint64_t size, bool wait) const {
    // Every write-back this warp submitted or saw in flight is counted;
    // the sync orders the lanes' observations before the leader's read.
    w.sync(mask);
    uint32_t started = 0;
    const bool leader = w.lane() == lowest_lane(mask);
    if (leader) started = client_atomic<uint32_t>(write_counts[f.window]).fetch_add(0, memory_order_acq_rel);
    return call(w, mask, gfs_op::close, 1u | 2u | (wait ? 4u : 0u), uint64_t(f.tag) << 32 | uint32_t(f.fd),
                size, nullptr, 0, nullptr, 0, started);
  }

  template <class Warp>
  DW_HD int persist_range(const Warp& w, const gfile& f, uint64_t size) const {
    if (size == 0) return 0;
    const request_status s = bytes.persist(w, base(f.window), size);
    return s.ok() ? 0 : -errno_of(s);
  }

  // Whether slot k's last request has its reply (a slot abandoned by a
  // caller that timed out is free again then).
  struct slot_answered {
    gfs_slot* slots;
    DW_HD bool operator()(uint32_t k) const {
      return shared_load_acquire(&slots[k].done) == shared_load_relaxed(&slots[k].ticket);
    }
  };

  // One request through a slot; every lane gets the reply. The leader lane
  // makes the atomics and reads the reply, but each wait is a loop of the
  // whole warp that decides every round from the leader's look (a
  // shuffle), so the lanes stay together and the warp's next call finds
  // all of them in active(). (A leader left alone in a long wait came back
  // split from the others: a whole-warp gread into one lane's stack was
  // then taken for a one-lane call.) `out` (leader-written) receives the
  // reply's text.
  template <class Warp>
  DW_HD reply call(const Warp& w, unsigned mask, gfs_op op, uint32_t flags, uint64_t a0, uint64_t a1,
                   const char* text, uint32_t len, char* out, uint32_t out_max, uint64_t a2 = 0) const {
    reply r;
    const unsigned src = lowest_lane(mask);
    const bool leader = w.lane() == src;
    const uint64_t t_start = now_ns(), dl = t_start + timeout_ns;
    // A slot, first come, first served (files/slot_queue.hpp).
    const unsigned long long ticket = leader ? free_slots.enter() : 0;
    uint32_t s = 0, polls = 0;
    for (int got = 0;; ++polls) {
      if (leader) {
        got = free_slots.poll(ticket, dl, s);
        if (!got && (polls & 63) == 63) free_slots.reclaim(dl, slot_answered{slots});
      }
      got = int(w.shfl(mask, uint32_t(got), src));
      if (got < 0) {
        r.err = 110;  // ETIMEDOUT
        return r;
      }
      if (got) break;
      backoff(polls);
    }
    const uint64_t t_slot = call_ns ? now_ns() : 0;
    s = w.shfl(mask, s, src);
    gfs_slot& q = slots[s];
    // The request; the text copied by every lane, a byte each in turn
    // (writes across PCIe), then published by the leader.
    const uint32_t lanes = popcount32(mask), rank = lane_rank(w, mask);
    for (uint32_t i = rank; i < len; i += lanes) q.text[i] = text[i];
    system_fence();
    w.sync(mask);
    uint32_t t = 0;
    if (leader) {
      shared_store_relaxed(&q.op, uint32_t(op));
      shared_store_relaxed(&q.flags, flags);
      shared_store_relaxed(&q.a0, a0);
      shared_store_relaxed(&q.a1, a1);
      shared_store_relaxed(&q.a2, a2);
      shared_store_relaxed(&q.len, len);
      system_fence();
      t = shared_load_relaxed(&q.ticket) + 1;
      shared_store_release(&q.ticket, t);
    }
    for (uint32_t i = 0;; ++i) {
      int32_t done = 0;  // 1: answered; -1: past the deadline
      if (leader) done = shared_load_acquire(&q.done) == t ? 1 : now_ns() > dl ? -1 : 0;
      done = int32_t(w.shfl(mask, uint32_t(done), src));
      if (done > 0) break;
      if (done < 0) {
        // The service may still answer: the slot is put back by whoever
        // finds it answered (slot_queue_ref::reclaim).
        if (leader) free_slots.abandon(s);
        r.err = 110;
        return r;
      }
#if DW_DEVICE_CODE
      // Every poll is a read across PCIe; a thousand warps polling every
      // few hundred ns may crowd the link (file_system_options::reply_poll_ns).
      if (reply_poll_ns) {
        const uint32_t ns = i < 5 ? 64u << i : reply_poll_ns;
        spin_pause(ns < reply_poll_ns ? ns : reply_poll_ns);
        continue;
      }
#endif
      backoff(i);
    }
    const uint64_t t_reply = call_ns ? now_ns() : 0;
    if (leader) {
      r.err = shared_load_relaxed(&q.err);
      r.r0 = shared_load_relaxed(&q.r0);
      r.r1 = shared_load_relaxed(&q.r1);
      r.r2 = shared_load_relaxed(&q.r2);
      r.r3 = shared_load_relaxed(&q.r3);
      if (out && out_max) {
        const uint32_t n = shared_load_relaxed(&q.len);
        const uint32_t m = n < out_max - 1 ? n : out_max - 1;
        for (uint32_t i = 0; i < m; ++i) out[i] = q.text[i];
        out[m] = 0;
      }
      free_slots.put(s, now_ns() + timeout_ns);
      if (call_ns) {
        const uint64_t t_end = now_ns();
        client_atomic<uint64_t>(call_ns[0]).fetch_add(1, memory_order_relaxed);
        client_atomic<uint64_t>(call_ns[1]).fetch_add(t_slot - t_start, memory_order_relaxed);
        client_atomic<uint64_t>(call_ns[2]).fetch_add(t_reply - t_slot, memory_order_relaxed);
        client_atomic<uint64_t>(call_ns[3]).fetch_add(t_end - t_reply, memory_order_relaxed);
        client_atomic<uint64_t>(call_ns[4]).fetch_add(polls, memory_order_relaxed);
        client_atomic<uint64_t>(call_ns[5]).fetch_add(polls > 0 ? 1 : 0, memory_order_relaxed);
      }
    }
    r.err = int32_t(w.shfl(mask, uint32_t(r.err), src));
    r.r0 = shfl64(w, mask, r.r0, src);
    r.r1 = shfl64(w, mask, r.r1, src);
    r.r2 = shfl64(w, mask, r.r2, src);
    r.r3 = shfl64(w, mask, r.r3, src);
    return r;
  }
};

}  // namespace deepwell
