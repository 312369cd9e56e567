// Whole rows of a dataset: row r is bytes [r * row_bytes, (r + 1) * row_bytes)
// (a feature vector, an embedding, a record). rows_ref gathers rows chosen by
// an index array into memory and scatters them back, a warp at a time, on GPU
// warps and CPU threads alike: the Python package's gather and scatter, and
// any kernel that wants rows rather than elements.
//
// When rows never straddle a page (row_bytes divides the page size), each lane
// of a warp takes one row, so a warp has up to 32 distinct pages in flight
// (one acquire, coalesced where rows share a page) and the whole warp then
// copies the rows one by one with 16-byte words. Larger or straddling rows go
// through array_ref::read_range / write_range, a row at a time, its pages
// spread over the lanes.
//
// Indices out of range are not an access: their output rows are zeroed and
// they are counted in the row_report (with one of them, for the message), so
// the host can name the bad index. Other failures (I/O errors, timeouts) set
// the cache's error flag as every access does.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "deepwell/views/array.hpp"

namespace deepwell {

// Indices out of range seen by gathers and scatters (host or mapped memory).
// Also the first failure of a row transfer (a packed request_status), so
// that the host learns of it without reading the cache's device-side flag.
struct row_report {
  unsigned long long bad = 0;      // how many
  unsigned long long example = 0;  // one of them, as an unsigned 64-bit value
  uint32_t failure = 0;            // packed request_status of the first failed transfer, 0 if none
};

class rows_ref {
 public:
  array_ref<uint8_t> bytes{};
  uint64_t rows = 0;
  uint32_t row_bytes = 0;
  row_report* report = nullptr;
  // The dataset's bytes where this client can read them in place (the
  // direct tier: host memory, or a file in the page cache, mapped), when
  // gathers should read rows from there without caching them: one-touch
  // reads, for rows that are read once (nullptr: through the cache).
  // Scatters go through the cache, unless in_place_writes: then they write
  // rows straight into in_place too (a writable dataset in host memory), so
  // that in-place gathers see every scattered row. A dataset read in place
  // must never also be written through the cache: a dirty row there would
  // be newer than the memory those gathers read.
  const uint8_t* in_place = nullptr;
  bool in_place_writes = false;

  // Every row lies inside one page.
  DW_HD bool packed() const { return row_bytes <= bytes.cache.page_size() && bytes.cache.page_size() % row_bytes == 0; }

  // Rows idx[0 .. count) into dst rows [0 .. count) (rows that fail read as
  // zeros; the failure is in the cache's error flag). Index: a signed or
  // unsigned integer type (negative values are out of range). Warp-collective,
  // every lane with the same arguments. Returns the first failure.
  template <class Warp, class Index>
  DW_HD request_status gather(const Warp& w, const Index* idx, uint64_t count, uint8_t* dst) const {
    if (in_place) return read_in_place(w, idx, count, dst);
    return move(w, idx, count, dst, false);
  }
  // src rows [0 .. count) into rows idx[0 .. count); pages are marked dirty.
  // With repeated indices, which copy lands is not defined.
  template <class Warp, class Index>
  DW_HD request_status scatter(const Warp& w, const Index* idx, uint64_t count, const uint8_t* src) const {
    if (bytes.read_only) {
      const request_status s = request_status::client(client_code::read_only);
      count_failure(s);
      return s;
    }
    if (in_place && in_place_writes) return write_in_place(w, idx, count, src);
    return move(w, idx, count, const_cast<uint8_t*>(src), true);
  }

 private:
  template <class Index>
  DW_HD static uint64_t as_row(Index i) {
    static_assert(std::is_integral_v<Index>, "row indices are integers");
    return uint64_t(i);  // a negative index becomes huge: out of range
  }

  DW_HD void count_bad(uint64_t r) const {
    if (!report) return;
    client_atomic<unsigned long long>(report->example).store(r, memory_order_relaxed);
    client_atomic<unsigned long long>(report->bad).fetch_add(1, memory_order_relaxed);
  }

  // A transfer failed: the cache's error flag (as every access) and the report.
  DW_HD void count_failure(request_status st) const {
    bytes.cache.set_error(st);
    if (!report) return;
    uint32_t none = 0;
    client_atomic<uint32_t>(report->failure).compare_exchange_strong(none, st.pack(), memory_order_relaxed);
  }

  template <class Warp>
  DW_HD static void zero(const Warp& w, unsigned mask, uint8_t* dst, uint32_t n) {
    const unsigned lanes = popcount32(mask);
    const unsigned rank = lane_rank(w, mask);
#if DW_DEVICE_CODE
    for (uint32_t i = rank; i < n; i += lanes) dst[i] = 0;
#else
    if (rank == 0) std::memset(dst, 0, n);
    (void)lanes;
#endif
  }

  template <class Warp, class Index>
  DW_HD request_status move(const Warp& w, const Index* idx, uint64_t count, uint8_t* mem, bool to_cache) const {
    return packed() ? move_packed(w, idx, count, mem, to_cache) : move_ranges(w, idx, count, mem, to_cache);
  }

  // Rows straight from the direct tier. With 16-byte rows and ends, the
  // rows of a step are one list of 16-byte words the lanes share, each lane
  // issuing a batch of loads before its stores (one link round trip per
  // batch, however small the rows).
  template <class Warp, class Index>
  DW_HD request_status read_in_place(const Warp& w, const Index* idx, uint64_t count, uint8_t* dst) const {
    const unsigned mask = w.active();
    const unsigned lanes = popcount32(mask);
    const unsigned rank = lane_rank(w, mask);
    for (uint64_t j = rank; j < count; j += lanes)
      if (as_row(idx[j]) >= rows) count_bad(as_row(idx[j]));
#if DW_DEVICE_CODE
    if (row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(in_place) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) {
      constexpr uint32_t batch = 8;
      const uint32_t words = row_bytes / 16;
      const uint64_t total = count * words;
      for (uint64_t base = rank; base < total; base += uint64_t(lanes) * batch) {
        uint4 v[batch];
#pragma unroll
        for (uint32_t k = 0; k < batch; ++k) {
          const uint64_t c = base + uint64_t(k) * lanes;
          if (c < total) {
            const uint64_t r = as_row(idx[c / words]);
            v[k] = r < rows ? __ldcs(reinterpret_cast<const uint4*>(in_place + r * row_bytes) + c % words)
                            : make_uint4(0, 0, 0, 0);
          }
        }
#pragma unroll
        for (uint32_t k = 0; k < batch; ++k) {
          const uint64_t c = base + uint64_t(k) * lanes;
          if (c < total) reinterpret_cast<uint4*>(dst)[c] = v[k];
        }
      }
      w.sync(mask);
      return {};
    }
#endif
    for (uint64_t j = 0; j < count; ++j) {
      const uint64_t r = as_row(idx[j]);
      uint8_t* row = dst + j * row_bytes;
      if (r < rows)
        detail::copy_bytes(w, mask, row, in_place + r * row_bytes, row_bytes);
      else
        zero(w, mask, row, row_bytes);
    }
    w.sync(mask);
    return {};
  }

  // Rows straight into the direct tier's (writable) memory, the warp's
  // lanes sharing each row's bytes.
  template <class Warp, class Index>
  DW_HD request_status write_in_place(const Warp& w, const Index* idx, uint64_t count, const uint8_t* src) const {
    const unsigned mask = w.active();
    const unsigned lanes = popcount32(mask);
    const unsigned rank = lane_rank(w, mask);
    for (uint64_t j = rank; j < count; j += lanes)
      if (as_row(idx[j]) >= rows) count_bad(as_row(idx[j]));
    uint8_t* base = const_cast<uint8_t*>(in_place);
    for (uint64_t j = 0; j < count; ++j) {
      const uint64_t r = as_row(idx[j]);
      if (r < rows) detail::copy_bytes(w, mask, base + r * row_bytes, src + j * row_bytes, row_bytes);
    }
    w.sync(mask);
    return {};
  }

  // One row per lane: up to 32 pages in flight per warp.
  template <class Warp, class Index>
  DW_HD request_status move_packed(const Warp& w, const Index* idx, uint64_t count, uint8_t* mem, bool to_cache) const {
    const page_cache_ref& c = bytes.cache;
    const unsigned mask = w.active();
    request_status result{};
    in_rounds(w, mask, count, [&](uint64_t base, uint64_t j) {
      const bool mine = j < count;
      const uint64_t r = mine ? as_row(idx[j]) : 0;
      const bool in = mine && r < rows;
      if (mine && !in) count_bad(r);
      const uint64_t byte = in ? r * row_bytes : 0;
      const warp_pin p = c.acquire(w, in, make_key(bytes.dataset, byte >> c.page_shift()));
      const bool ok = in && p.status.ok();
      if (in && !ok) count_failure(p.status);
      const unsigned failed = w.ballot(mask, in && !ok);
      if (failed) {
        const uint32_t packed_status = w.shfl(mask, p.status.pack(), lowest_lane(failed));
        if (result.ok()) result = request_status::unpack(packed_status);
      }
      for (unsigned m = w.ballot(mask, mine); m; m &= m - 1) {
        const unsigned l = lowest_lane(m);
        const bool lane_ok = w.shfl(mask, ok ? 1u : 0u, l) != 0;
        const uint32_t slot = w.shfl(mask, p.slot, l);
        const uint32_t off = w.shfl(mask, uint32_t(byte & (c.page_size() - 1)), l);
        uint8_t* row = mem + (base + popcount32(mask & ((1u << l) - 1))) * row_bytes;
        if (lane_ok) {
          uint8_t* page = c.page_data(slot) + off;
          if (to_cache)
            detail::copy_bytes(w, mask, page, row, row_bytes);
          else
            detail::copy_bytes(w, mask, row, page, row_bytes);
        } else if (!to_cache) {
          zero(w, mask, row, row_bytes);
        }
      }
      c.release(w, p, to_cache && ok);
    });
    return result;
  }

  // A row at a time, its pages over the lanes (rows larger than a page or
  // straddling pages).
  template <class Warp, class Index>
  DW_HD request_status move_ranges(const Warp& w, const Index* idx, uint64_t count, uint8_t* mem, bool to_cache) const {
    const unsigned mask = w.active();
    request_status result{};
    for (uint64_t j = 0; j < count; ++j) {
      const uint64_t r = as_row(idx[j]);
      uint8_t* row = mem + j * row_bytes;
      if (r >= rows) {
        if (w.lane() == lowest_lane(mask)) count_bad(r);
        if (!to_cache) zero(w, mask, row, row_bytes);
        w.sync(mask);
        continue;
      }
      const request_status s = to_cache ? bytes.write_range(w, row, r * row_bytes, row_bytes)
                                        : bytes.read_range(w, row, r * row_bytes, row_bytes);
      if (!s.ok()) {
        if (!to_cache) zero(w, mask, row, row_bytes);
        if (result.ok()) result = s;
        if (w.lane() == lowest_lane(mask)) count_failure(s);
      }
    }
    return result;
  }
};

}  // namespace deepwell
