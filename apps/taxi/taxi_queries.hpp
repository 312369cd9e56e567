// BaM's taxi queries Q0-Q5 (docs/analytics.md), written once for GPU warps
// and CPU threads over any column accessor: deepwell arrays (the data read
// where it lies, the selected rows only), or plain pointers (the floor:
// columns already in GPU memory; the tiling baseline: row groups copied in).
//
// Every query selects the trips of at least 30 miles, a scan of
// trip_distance; Q1 adds up their total_amount, and each further query
// takes one more column off it (Q2 extra, the surcharges; Q3
// improvement_surcharge, the hail fee; Q4 tolls_amount; Q5 mta_tax, the
// tax). Q5's answer is the dollars a mile the driver makes on those trips:
// net / distance. All sums are exact (integers: cents, hundredths of a mile).
#pragma once
#include <cstdint>

#include "deepwell/common/warp.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::table {

constexpr int taxi_queries = 6;
constexpr int32_t taxi_long_trip = 3000;  // 30.00 miles
// The columns query q reads: the first q + 1 of these.
constexpr const char* taxi_query_columns[taxi_queries] = {"trip_distance", "total_amount", "extra",
                                                         "improvement_surcharge", "tolls_amount", "mta_tax"};

struct taxi_query_result {
  unsigned long long selected;  // trips of at least 30 miles
  long long distance;           // their miles, in hundredths
  long long net;                // Q1-Q5: their total_amount less the columns taken off, in cents
  unsigned long long failed;    // accesses that failed (the cache keeps the first error)
};

// A column in memory the clients address directly.
struct plain_column {
  const int32_t* p = nullptr;
  uint64_t n = 0;
  template <class Warp>
  DW_HD int32_t read(const Warp&, uint64_t i, request_status* s) const {
    if (s) *s = request_status{};
    return p[i];
  }
  DW_HD int32_t read_sparse(uint64_t i, request_status* s) const { return read(this_thread_warp{}, i, s); }
};

namespace detail {

// Loads elements base + lane + j * lanes (j < per_lane) of the scan column:
// bit j of the result is set where the trip is long; adds their distance.
// Array: one page pinned once for the warp's whole group (reference reuse), released
// before the selected rows' other columns are fetched.
template <class Warp>
DW_HD uint32_t taxi_scan_group(const Warp& w, const array_ref<int32_t>& c, uint64_t base, uint32_t per_lane,
                               unsigned lane, unsigned lanes, long long& dist, unsigned long long& failed) {
  shared_page<int32_t> h = c.page_shared(w, base);  // one pin for the warp
  uint32_t bits = 0;
  if (h.ok()) {
    for (uint32_t j = 0; j < per_lane; ++j) {
      const uint64_t k = base + lane + uint64_t(j) * lanes;
      if (k < c.n) {
        const int32_t d = h[k];
        if (d >= taxi_long_trip) {
          bits |= 1u << j;
          dist += d;
        }
      }
    }
  } else if (lane == 0) {
    ++failed;
  }
  c.release_shared(w, h);
  return bits;
}

template <class Warp>
DW_HD uint32_t taxi_scan_group(const Warp&, const plain_column& c, uint64_t base, uint32_t per_lane, unsigned lane,
                               unsigned lanes, long long& dist, unsigned long long&) {
  uint32_t bits = 0;
  for (uint32_t j = 0; j < per_lane; ++j) {
    const uint64_t k = base + lane + uint64_t(j) * lanes;
    if (k < c.n) {
      const int32_t d = c.p[k];
      if (d >= taxi_long_trip) {
        bits |= 1u << j;
        dist += d;
      }
    }
  }
  return bits;
}

// A group: the rows one pass of the scan marks (32 a lane, inside one page).
// A unit: the rows a worker takes at once, a whole page for arrays, so that
// a CPU thread (one lane, 32 rows a group) does not share pages with others
// and each scan page is fetched once.
template <class Col>
DW_HD uint32_t taxi_group_elems(const Col& c, unsigned lanes);
template <>
DW_HD inline uint32_t taxi_group_elems(const array_ref<int32_t>& c, unsigned lanes) {
  const uint32_t per_page = c.cache.page_size() / 4;
  return per_page < lanes * 32 ? per_page : lanes * 32;
}
template <>
DW_HD inline uint32_t taxi_group_elems(const plain_column&, unsigned lanes) {
  return lanes * 32;
}
DW_HD inline uint32_t taxi_unit_elems(const array_ref<int32_t>& c, uint32_t group) {
  const uint32_t per_page = c.cache.page_size() / 4;
  return per_page > group ? per_page : group;
}
DW_HD inline uint32_t taxi_unit_elems(const plain_column&, uint32_t group) { return group; }

}  // namespace detail

// One worker (a warp, or a CPU thread as one_lane) runs query q over
// groups first, first + step, ... of the table's rows; results are added
// to *out. cols[0..q] are the query's columns, all of the same length.
// sparse: the selected rows' values by read_sparse (a column with a direct
// tier: the value alone from host memory, no page brought in); else by
// read (the page into the cache).
template <class Warp, class Col>
DW_HD void taxi_query_worker(const Warp& w, const Col* cols, int q, uint64_t first, uint64_t step,
                             taxi_query_result* out, bool sparse = true) {
  const unsigned mask = w.active();
  const unsigned lanes = popcount32(mask);
  const unsigned lane = popcount32(mask & ((1u << w.lane()) - 1));
  const uint32_t group = detail::taxi_group_elems(cols[0], lanes);
  const uint32_t unit = detail::taxi_unit_elems(cols[0], group);
  const uint32_t per_lane = group / lanes;
  const uint64_t rows = cols[0].n, units = (rows + unit - 1) / unit;
  unsigned long long selected = 0, failed = 0;
  long long dist = 0, net = 0;
  for (uint64_t u = first; u < units; u += step)
  for (uint64_t base = u * unit; base < (u + 1) * unit && base < rows; base += group) {
    uint32_t bits = detail::taxi_scan_group(w, cols[0], base, per_lane, lane, lanes, dist, failed);
    selected += popcount32(bits);
    // The selected rows' other columns: lanes diverge here, each reading
    // its own rows (one element of a page each: the data-dependent fetch).
    while (q > 0 && bits) {
      const uint32_t j = lowest_lane(bits);
      bits &= bits - 1;
      const uint64_t k = base + lane + uint64_t(j) * lanes;
      request_status s;
      long long v = sparse ? cols[1].read_sparse(k, &s) : cols[1].read(this_thread_warp{}, k, &s);
      failed += !s.ok();
      for (int c = 2; c <= q; ++c) {
        v -= sparse ? cols[c].read_sparse(k, &s) : cols[c].read(this_thread_warp{}, k, &s);
        failed += !s.ok();
      }
      net += v;
    }
  }
  client_atomic<unsigned long long>(out->selected).fetch_add(selected, memory_order_relaxed);
  client_atomic<unsigned long long>(out->failed).fetch_add(failed, memory_order_relaxed);
  client_atomic<unsigned long long>(*reinterpret_cast<unsigned long long*>(&out->distance))
      .fetch_add((unsigned long long)dist, memory_order_relaxed);
  client_atomic<unsigned long long>(*reinterpret_cast<unsigned long long*>(&out->net))
      .fetch_add((unsigned long long)net, memory_order_relaxed);
}

}  // namespace deepwell::table
