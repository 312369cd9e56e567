// array<T> (host) and array_ref<T> (its view): a dataset seen as an array of
// T through the page cache. array_ref is trivially copyable: kernels take it
// by value, CPU threads share it.
//
//   __global__ void gather(deepwell::array_ref<float> a, const uint64_t* idx, float* out, int n) {
//     int i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < n) out[i] = a[idx[i]];   // a hit in HBM, or a fetch through the controller
//   }
//
// On the GPU the threads of a warp that touch the same page share one
// lookup (and one fetch). Every access reports failures: `try_read` and
// `write` return a status; `a[i]` returns T{} on failure and sets the
// cache's error flag, which the host reads after the kernel.
//
// The warp-collective calls (read, write, page, read_range, write_range)
// must be called by all lanes that are active together, as any CUDA *_sync
// call; in divergent code each converged group coalesces on its own.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/cache/page_cache_ref.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell {

// One page of an array, pinned in the cache for as long as the handle is
// held: elements of the page are read (and written) with no further lookups.
// Reading never marks the page dirty; write() does. Call release() once.
template <class T>
class page_handle {
 public:
  DW_HD bool ok() const { return status_.ok(); }
  DW_HD request_status status() const { return status_; }
  // Array indices [first(), first() + count()) are in this page.
  DW_HD uint64_t first() const { return first_; }
  DW_HD uint32_t count() const { return count_; }
  DW_HD bool contains(uint64_t i) const { return i - first_ < count_; }
  DW_HD const T& operator[](uint64_t i) const { return base_[i - first_]; }
  DW_HD const T* data() const { return base_; }
  DW_HD void write(uint64_t i, const T& v) {
    base_[i - first_] = v;
    dirty_ = true;
  }
  DW_HD void release() {
    if (status_.ok() && cache_.attached()) cache_.unpin(slot_, dirty_);
    status_ = request_status::client(client_code::invalid_argument);
  }
  // Makes this page's writes so far durable (written back, then its
  // dataset flushed; group commit). Every converged lane of the warp calls
  // it together, each with a handle from page() of an array on the same
  // cache (one not ok() takes part and returns its own status); the handle
  // stays pinned.
  DW_HD request_status persist() {
    const bool have = status_.ok() && cache_.attached();
    const request_status r = cache_.persist_pinned(this_thread_warp{}, have ? slot_ : ~0u, have && dirty_);
    dirty_ = false;
    return have ? r : status_;
  }

 private:
  template <class>
  friend class array_ref;
  page_cache_ref cache_{};
  T* base_ = nullptr;
  uint64_t first_ = 0;
  uint32_t count_ = 0;
  uint32_t slot_ = ~0u;
  bool dirty_ = false;
  request_status status_{};
};

// One page of an array pinned once for a whole warp (array_ref::page_shared):
// every lane reads from it, one pin and one release for all of them, where
// page handles pin once per lane. Read-only.
template <class T>
struct shared_page {
  warp_pin pin{};
  const T* base = nullptr;
  uint64_t first = 0;  // array indices [first, first + count) are in this page
  uint32_t count = 0;
  request_status status = request_status::client(client_code::invalid_argument);  // nothing pinned yet
  DW_HD bool ok() const { return status.ok(); }
  DW_HD bool contains(uint64_t i) const { return i - first < count; }
  DW_HD const T& operator[](uint64_t i) const { return base[i - first]; }
};

template <class T>
class array_ref {
  static_assert(std::is_trivially_copyable_v<T>, "array_ref<T> needs a trivially copyable T");

 public:
  page_cache_ref cache{};
  uint32_t dataset = 0;
  uint64_t n = 0;
  bool read_only = false;

  DW_HD uint64_t size() const { return n; }

  // ---- reads ----
  DW_HD T operator[](uint64_t i) const { return try_read(i, nullptr); }

  DW_HD T try_read(uint64_t i, request_status* status) const {
    return read(this_thread_warp{}, i, status);
  }

  template <class Warp>
  DW_HD T read(const Warp& w, uint64_t i, request_status* status) const {
    const bool in = i < n;
    const uint64_t byte = in ? i * sizeof(T) : 0;
    T v{};
    const request_status r = cache.read_element(w, in, make_key(dataset, byte >> cache.page_shift()),
                                                uint32_t(byte & (cache.page_size() - 1)), v);
    const request_status s = in ? r : request_status::client(client_code::out_of_range);
    cache.set_error(s);
    if (status) *status = s;
    return v;
  }

  // A read that brings no page into the cache, for accesses too sparse to
  // reuse one (a selected row's value): a read-only dataset with a direct
  // tier gives the element straight from host memory (one small read over
  // the link, as zero-copy does, where read() would copy the whole page in);
  // any other dataset is read through the cache as read() does. Read-only:
  // the host's bytes are the cache's, so skipping the cache is safe.
  DW_HD T read_sparse(uint64_t i, request_status* status) const {
    if (i < n) {
      if (const uint8_t* host = cache.direct_read_only(dataset)) {
        if (status) *status = request_status{};
        const uint8_t* at = host + i * sizeof(T);
        if ((reinterpret_cast<uintptr_t>(at) & (alignof(T) - 1)) == 0) return *reinterpret_cast<const T*>(at);
        T v;
        memcpy(&v, at, sizeof(T));
        return v;
      }
    }
    return read(this_thread_warp{}, i, status);
  }

  // ---- writes (the page is fetched first, then marked dirty) ----
  DW_HD request_status write(uint64_t i, const T& v) const {
    return write(this_thread_warp{}, i, v);
  }

  template <class Warp>
  DW_HD request_status write(const Warp& w, uint64_t i, const T& v) const {
    const bool in = i < n && !read_only;
    const uint64_t byte = in ? i * sizeof(T) : 0;
    const warp_pin p = cache.acquire(w, in, make_key(dataset, byte >> cache.page_shift()));
    const request_status s = in ? p.status
                                : request_status::client(read_only && i < n ? client_code::read_only
                                                                            : client_code::out_of_range);
    if (s.ok()) *reinterpret_cast<T*>(cache.page_data(p.slot) + (byte & (cache.page_size() - 1))) = v;
    cache.release(w, p, s.ok());
    cache.set_error(s);
    return s;
  }

  // ---- a pinned page: reference reuse across the elements of one page ----
  DW_HD page_handle<T> page(uint64_t i) const {
    return page(this_thread_warp{}, i);
  }

  template <class Warp>
  DW_HD page_handle<T> page(const Warp& w, uint64_t i) const {
    const bool in = i < n;
    const uint64_t byte = in ? i * sizeof(T) : 0;
    const uint64_t pg = byte >> cache.page_shift();
    const warp_pin p = cache.acquire(w, in, make_key(dataset, pg));
    page_handle<T> h;
    h.status_ = in ? p.status : request_status::client(client_code::out_of_range);
    // Every lane gets a pin of its own, so each releases its handle alone.
    if (p.owner) cache.add_pins(p.slot, popcount32(p.peers) - 1);
    w.sync(p.mask);
    h.cache_ = cache;  // failed handles too: persist() is collective over the warp's handles
    if (h.status_.ok()) {
      const uint64_t per_page = cache.page_size() / sizeof(T);
      h.slot_ = p.slot;
      h.base_ = reinterpret_cast<T*>(cache.page_data(p.slot));
      h.first_ = pg * per_page;
      h.count_ = uint32_t(n - h.first_ < per_page ? n - h.first_ : per_page);
    }
    cache.set_error(h.status_);
    return h;
  }

  // The page holding element i, pinned once for the warp: every lane of w
  // passes the same i (a warp walking one list). Every lane calls
  // release_shared with it afterwards.
  template <class Warp>
  DW_HD shared_page<T> page_shared(const Warp& w, uint64_t i) const {
    const bool in = i < n;
    const uint64_t byte = in ? i * sizeof(T) : 0;
    const uint64_t pg = byte >> cache.page_shift();
    shared_page<T> h;
    h.pin = cache.acquire(w, in, make_key(dataset, pg));
    h.status = in ? h.pin.status : request_status::client(client_code::out_of_range);
    if (h.status.ok()) {
      const uint64_t per_page = cache.page_size() / sizeof(T);
      h.base = reinterpret_cast<const T*>(cache.page_data(h.pin.slot));
      h.first = pg * per_page;
      h.count = uint32_t(n - h.first < per_page ? n - h.first : per_page);
    }
    cache.set_error(h.status);
    return h;
  }
  template <class Warp>
  DW_HD void release_shared(const Warp& w, shared_page<T>& h) const {
    cache.release(w, h.pin, false);
    h = shared_page<T>{};
  }

  // ---- pin-free reads of one page, element after element (a warp walking a list) ----

  // One past the last element of i's page (capped at size()); i < size().
  DW_HD uint64_t page_end(uint64_t i) const {
    const uint64_t per_page = cache.page_size() / sizeof(T);
    const uint64_t last = (i / per_page + 1) * per_page;
    return last < n ? last : n;
  }
  // Element i (< size()) read with no pin (page_cache_ref::read_seen): `at`
  // starts empty for a page and is kept across this lane's reads of it.
  // False: the page is not cached and valid (or changed meanwhile); the
  // caller reads through a pin instead (page_shared).
  DW_HD bool read_seen(uint64_t i, page_sight& at, T& out) const {
    const uint64_t byte = i * sizeof(T);
    return cache.read_seen(make_key(dataset, byte >> cache.page_shift()), uint32_t(byte & (cache.page_size() - 1)),
                           at, out);
  }

  // ---- bulk copies: the whole warp moves a range, one page per lane in flight ----

  // Copies elements [begin, begin + count) to dst (global or shared
  // memory). All lanes pass the same arguments.
  template <class Warp>
  DW_HD request_status read_range(const Warp& w, T* dst, uint64_t begin, uint64_t count) const {
    return range(w, dst, begin, count, false);
  }
  template <class Warp>
  DW_HD request_status write_range(const Warp& w, const T* src, uint64_t begin, uint64_t count) const {
    if (read_only) return request_status::client(client_code::read_only);
    return range(w, const_cast<T*>(src), begin, count, true);
  }
  // write_range for output nobody reads first: a page that is not cached
  // is not read before the write, it starts as zeros (the bytes the range
  // leaves out of it are zeros in the dataset, or the dataset's target
  // merges them: the file API's write-once files).
  template <class Warp>
  DW_HD request_status write_range_unread(const Warp& w, const T* src, uint64_t begin, uint64_t count) const {
    if (read_only) return request_status::client(client_code::read_only);
    return range(w, const_cast<T*>(src), begin, count, true, true);
  }
  DW_HD request_status read_range(T* dst, uint64_t begin, uint64_t count) const {
    return read_range(this_thread_warp{}, dst, begin, count);
  }
  DW_HD request_status write_range(const T* src, uint64_t begin, uint64_t count) const {
    return write_range(this_thread_warp{}, src, begin, count);
  }

  // ---- durability (docs/durability.md) ----

  // Makes elements [begin, begin + count) durable: written back and their
  // dataset flushed (one flush shared by the persists waiting at the time).
  // Returns once every write made to them before the call is durable.
  // Every lane of `w` calls it together; lanes may pass different ranges
  // (each thread persisting its own data). A read-only array has nothing
  // to persist.
  template <class Warp>
  DW_HD request_status persist(const Warp& w, uint64_t begin, uint64_t count) const {
    const bool bad = begin > n || count > n - begin;
    uint64_t first = 1, last = 0;  // empty
    if (!bad && count) {
      first = (begin * sizeof(T)) >> cache.page_shift();
      last = ((begin + count) * sizeof(T) - 1) >> cache.page_shift();
    }
    const request_status r = cache.persist(w, read_only ? ~0u : dataset, first, last);
    if (bad) {
      cache.set_error(request_status::client(client_code::out_of_range));
      return request_status::client(client_code::out_of_range);
    }
    return r;
  }
  DW_HD request_status persist(uint64_t begin, uint64_t count) const {
    return persist(this_thread_warp{}, begin, count);
  }
  // Every dirty page of the cache (all its datasets), then each flushed.
  template <class Warp>
  DW_HD request_status persist_all(const Warp& w) const {
    return cache.persist_all(w);
  }
  DW_HD request_status persist_all() const { return persist_all(this_thread_warp{}); }

  // ---- prefetch: start fetching the page of element i, do not wait ----
  DW_HD void prefetch(uint64_t i) const {
    if (i >= n) return;
    cache.prefetch(make_key(dataset, (i * sizeof(T)) >> cache.page_shift()), this_thread_warp{}.queue_hint());
  }

 private:
  template <class Warp>
  DW_HD request_status range(const Warp& w, T* mem, uint64_t begin, uint64_t count, bool to_cache,
                             bool unread = false) const {
    if (begin > n || count > n - begin) {
      cache.set_error(request_status::client(client_code::out_of_range));
      return request_status::client(client_code::out_of_range);
    }
    if (count == 0) return {};
    const unsigned mask = w.active();
    const unsigned lanes = popcount32(mask);
    const unsigned rank = lane_rank(w, mask);
    const uint64_t b0 = begin * sizeof(T), b1 = (begin + count) * sizeof(T);
    const uint64_t p0 = b0 >> cache.page_shift(), p1 = (b1 - 1) >> cache.page_shift();
    request_status result{};
    for (uint64_t base = p0; base <= p1; base += lanes) {
      const uint64_t mine = base + rank;
      // A write that starts at or before this page's start covers its
      // bytes up to b1: a page written whole is not read first.
      const uint64_t start = mine << cache.page_shift(), end = start + cache.page_size();
      const uint32_t cover = to_cache && mine <= p1 && (unread || b0 <= start)
                                 ? (unread ? cache.page_size() : uint32_t((b1 < end ? b1 : end) - start))
                                 : 0;
      // The page's new bytes, so that a page overwritten whole is filled
      // from them before anyone else can see it (unread: zeros).
      const void* cover_src = cover && !unread ? reinterpret_cast<const uint8_t*>(mem) + (start - b0) : nullptr;
      const warp_pin p = cache.acquire(w, mine <= p1, make_key(dataset, mine), 0, cover, cover_src);
      const unsigned have = w.ballot(mask, mine <= p1 && p.status.ok());
      const unsigned bad = w.ballot(mask, mine <= p1 && !p.status.ok());
      if (bad && result.ok())
        result = request_status::unpack(w.shfl(mask, p.status.pack(), lowest_lane(bad)));
      else if (bad)
        (void)w.shfl(mask, 0, lowest_lane(bad));
      for (unsigned m = have; m; m &= m - 1) {
        const unsigned l = lowest_lane(m);
        const uint32_t s = w.shfl(mask, p.slot, l);
        const uint64_t pg = base + popcount32(mask & ((1u << l) - 1));
        const uint64_t lo = b0 > (pg << cache.page_shift()) ? b0 : (pg << cache.page_shift());
        const uint64_t hi = b1 < ((pg + 1) << cache.page_shift()) ? b1 : ((pg + 1) << cache.page_shift());
        uint8_t* page = cache.page_data(s) + (lo & (cache.page_size() - 1));
        uint8_t* other = reinterpret_cast<uint8_t*>(mem) + (lo - b0);
        if (to_cache)
          detail::copy_bytes(w, mask, page, other, uint32_t(hi - lo));
        else
          detail::copy_bytes(w, mask, other, page, uint32_t(hi - lo));
      }
      if (have && w.lane() == lowest_lane(have))
        cache.count_accesses(w, popcount32(have));
      cache.release(w, p, to_cache && p.status.ok() && mine <= p1);
    }
    cache.set_error(result);
    return result;
  }
};

// A cursor: reference reuse across accesses (BaM's, with reads that never
// mark a page dirty). It keeps the page of its last access pinned, so an
// access to the same page costs no lookup at all: the element is read
// straight from the pinned slot. An access to another page drops that pin
// and takes the new page's (one lookup of the thread's own: lanes move at
// moments of their own, so the move makes no warp collective and does not
// coalesce). For walks over neighbouring elements: a scan, a neighbour
// list, a run of rows.
//
//   array_cursor<uint32_t> c(nbr);
//   for (uint64_t i = b; i < e; ++i) sum += c.read(i);   // one lookup a page
//
// Per thread; made for divergent code. A live cursor holds one pin, so a
// kernel that keeps c cursors per thread while it makes other accesses
// needs c more pages per lane in the cache (check_launch's `cursors`).
// Writes mark the page dirty when the cursor leaves it or is released: a
// flush sees them from then on. Release it (or let it go out of scope)
// before the kernel ends.
template <class T>
class array_cursor {
 public:
  DW_HD explicit array_cursor(const array_ref<T>& a) : a_(a) {}
  DW_HD ~array_cursor() { release(); }
  array_cursor(const array_cursor&) = delete;
  array_cursor& operator=(const array_cursor&) = delete;

  DW_HD T read(uint64_t i, request_status* status = nullptr) {
    const bool ok = at(i);
    if (status) *status = ok ? request_status{} : h_.status();
    return ok ? h_[i] : T{};
  }
  DW_HD request_status write(uint64_t i, const T& v) {
    if (a_.read_only && i < a_.n) {
      const request_status s = request_status::client(client_code::read_only);
      a_.cache.set_error(s);
      return s;
    }
    if (!at(i)) return h_.status();
    h_.write(i, v);
    return {};
  }
  // Drops the pin (marking the page dirty if it was written).
  DW_HD void release() {
    if (h_.ok()) h_.release();
    h_ = page_handle<T>{};
  }
  // The pinned page (not ok() when none).
  DW_HD const page_handle<T>& page() const { return h_; }

 private:
  // Pins i's page unless it is the one held; false (h_ says why) if it
  // cannot be (out of range, a failed fill).
  DW_HD bool at(uint64_t i) {
    if (h_.ok() && h_.contains(i)) return true;
    release();
    h_ = a_.page(this_thread_alone{}, i);  // lanes move at moments of their own: no collectives (warp.hpp)
    return h_.ok();
  }
  array_ref<T> a_;
  page_handle<T> h_{};
};

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
  // Host side of persist: elements [begin, begin + count) durable (the
  // cache's own kernel or CPU threads; may run beside other kernels).
  request_status persist(uint64_t begin, uint64_t count) {
    if (begin > ref_.n || count > ref_.n - begin)
      throw error("array::persist: elements [" + std::to_string(begin) + ", +" + std::to_string(count) +
                  ") outside the array of " + std::to_string(ref_.n));
    if (count == 0 || ref_.read_only) return {};
    const uint32_t shift = cache_->ref().page_shift();
    return cache_->persist(ref_.dataset, (begin * sizeof(T)) >> shift, ((begin + count) * sizeof(T) - 1) >> shift);
  }
  // Every dirty page of the cache, then each writable dataset flushed (flush()).
  request_status persist_all() { return cache_->flush(); }

 private:
  std::shared_ptr<page_cache> cache_;
  array_ref<T> ref_{};
};

}  // namespace deepwell
