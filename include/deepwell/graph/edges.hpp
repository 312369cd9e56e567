// How an algorithm reaches a graph's arrays: two small by-value views with
// the same warp-collective interface, so each algorithm is written once.
//
//   memory_graph  plain pointers: device memory (the all-in-GPU baseline),
//                 pinned host memory mapped for the GPU (zero-copy, EMOGI),
//                 or host memory for CPU threads.
//   cached_graph  deepwell arrays: the neighbour (and weight) lists, and the
//                 offsets unless they are given in memory, through the page
//                 cache. A warp reads a list a page at a time. A short run
//                 of a cached page (a few strides) is read with no pin, each
//                 lane checking its reads (array_ref::read_seen); otherwise
//                 one lookup pins the page once for the warp, and every lane
//                 reads from it (reference reuse).
//
// Collective calls (offsets, for_each_edge) are made by all lanes of the
// warp together with the same arguments where noted, as the cache requires;
// for_each_edge's callback runs per lane and must not call collectives.
#pragma once
#include <cstdint>

#include "deepwell/common/warp.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::graph {

// The lanes stride over entries [b, e) of plain arrays; stops after the
// first stride in which some lane's fn returned true. Returns the entries
// looked at (whole strides).
template <bool Weighted, class Warp, class Fn>
DW_HD uint64_t stride_over(const Warp& w, const uint32_t* nbr, const uint32_t* wts, uint64_t b, uint64_t e, Fn& fn) {
  const unsigned mask = w.active();
  const unsigned lanes = popcount32(mask), rank = lane_rank(w, mask);
  for (uint64_t base = b; base < e; base += lanes) {
    const uint64_t i = base + rank;
    const bool stop = i < e && fn(nbr[i], Weighted ? wts[i] : 0u);
    if (w.ballot(mask, stop)) return (base + lanes < e ? base + lanes : e) - b;
  }
  return e - b;
}

// A lane's first entries of a list [b, e) in plain memory with one read:
// the aligned 16-byte word holding entry b where it lies inside the list
// (nothing past e is touched), else entry b alone. words[skip, skip +
// count) are entries b, b + 1, ...; count 0 for an empty list. Bottom-up
// BFS reads these for every lane at once before walking any list with the
// whole warp (over the host link a 16-byte read costs what a 128-byte one
// does: one request).
DW_HD DW_FORCEINLINE unsigned first_entries(const uint32_t* nbr, uint64_t b, uint64_t e, uint32_t (&words)[4],
                                            unsigned& skip) {
  skip = 0;
  if (b >= e) return 0;
  const uint64_t q = b & ~uint64_t(3);
  if (q + 4 <= e && (reinterpret_cast<uintptr_t>(nbr) & 15) == 0) {
#if DW_DEVICE_CODE
    const uint4 v = *reinterpret_cast<const uint4*>(nbr + q);
    words[0] = v.x;
    words[1] = v.y;
    words[2] = v.z;
    words[3] = v.w;
#else
    for (unsigned j = 0; j < 4; ++j) words[j] = nbr[q + j];
#endif
    skip = unsigned(b - q);
    return 4 - skip;
  }
  words[0] = nbr[b];
  return 1;
}

struct memory_graph {
  uint64_t n = 0;
  const uint64_t* offsets = nullptr;
  const uint32_t* nbr = nullptr;
  const uint32_t* wts = nullptr;

  DW_HD uint64_t nodes() const { return n; }

  // [b, e) of this lane's node v (b = e = 0 when !want).
  template <class Warp>
  DW_HD void range(const Warp&, bool want, uint64_t v, uint64_t& b, uint64_t& e) const {
    b = want ? offsets[v] : 0;
    e = want ? offsets[v + 1] : 0;
  }

  // This lane's first entries of [b, e) (first_entries; per lane, no
  // collective).
  DW_HD unsigned peek(uint64_t b, uint64_t e, uint32_t (&words)[4], unsigned& skip) const {
    return first_entries(nbr, b, e, words, skip);
  }

  // Calls fn(neighbour, weight) for the edges [b, e) (same b, e in every
  // lane), lanes striding over them; stops after the first stride in which
  // some lane's fn returned true. Returns the edges looked at. (OneTouch
  // matters only to cached_graph.)
  template <bool Weighted, bool OneTouch = false, class Warp, class Fn>
  DW_HD uint64_t for_each_edge(const Warp& w, uint64_t b, uint64_t e, Fn&& fn) const {
    return stride_over<Weighted>(w, nbr, wts, b, e, fn);
  }
};

struct cached_graph {
  uint64_t n = 0;
  const uint64_t* offsets_mem = nullptr;  // offsets in memory when not null
  // The lists as the client can read them in place (the direct tier's
  // mapping of a resident file, or host memory), or nullptr. Reads marked
  // OneTouch (a bottom-up BFS level stops after a few entries of most
  // lists and never comes back) go straight there, 128 bytes per stride,
  // instead of pulling whole pages into the cache.
  const uint32_t* nbr_stream = nullptr;
  const uint32_t* wts_stream = nullptr;
  array_ref<uint64_t> offsets{};
  array_ref<uint32_t> nbr{};
  array_ref<uint32_t> wts{};
  // Unweighted lists whose part in a page spans at most this many warp
  // strides are read with no pin; 0 pins every page. A pin costs two
  // atomics and a lookup the lanes wait for; a pin-free stride costs one
  // more dependent load (the check), so long runs of a page still pin.
  uint32_t pin_free_strides = 4;

  DW_HD uint64_t nodes() const { return n; }

  template <class Warp>
  DW_HD void range(const Warp& w, bool want, uint64_t v, uint64_t& b, uint64_t& e) const {
    if (offsets_mem) {
      b = want ? offsets_mem[v] : 0;
      e = want ? offsets_mem[v + 1] : 0;
      return;
    }
    // Collective reads: the lanes' nodes are consecutive, so one or two
    // page lookups serve the warp. Lanes that want nothing read a wanting
    // lane's entry (their duplicate requests coalesce with it).
    const unsigned mask = w.active();
    const unsigned act = w.ballot(mask, want);
    if (!act) {
      b = e = 0;
      return;
    }
    const uint64_t lead = shfl64(w, mask, v, lowest_lane(act));  // every lane shuffles (a collective)
    const uint64_t vv = want ? v : lead;
    b = offsets.read(w, vv, nullptr);
    e = offsets.read(w, vv + 1, nullptr);
    if (!want) b = e = 0;
  }

  // peek for one-touch reads: from the lists in place where they are
  // (nbr_stream); else nothing (count 0), and the warp's walk reads them.
  DW_HD unsigned peek(uint64_t b, uint64_t e, uint32_t (&words)[4], unsigned& skip) const {
    skip = 0;
    return nbr_stream ? first_entries(nbr_stream, b, e, words, skip) : 0;
  }

  template <bool Weighted, bool OneTouch = false, class Warp, class Fn>
  DW_HD uint64_t for_each_edge(const Warp& w, uint64_t b, uint64_t e, Fn&& fn) const {
    if (OneTouch && nbr_stream && (!Weighted || wts_stream)) return stride_over<Weighted>(w, nbr_stream, wts_stream, b, e, fn);
    const unsigned mask = w.active();
    const unsigned lanes = popcount32(mask), rank = lane_rank(w, mask);
    uint64_t i0 = b;
    while (i0 < e) {
      if (!Weighted && i0 < nbr.n) {
        const uint64_t last = nbr.page_end(i0);
        const uint64_t end = e < last ? e : last;
        if (end - i0 <= uint64_t(pin_free_strides) * lanes) {
          // Every lane reads its entries with no pin and checks each read;
          // fn runs only on entries the whole stride read right. A stride
          // that some lane could not read goes to the pinned path below.
          page_sight at;
          uint64_t base = i0;
          bool stopped = false;
          for (; base < end && !stopped; base += lanes) {
            const uint64_t i = base + rank;
            uint32_t u = 0;
            const bool ok = i >= end || nbr.read_seen(i, at, u);
            if (w.ballot(mask, !ok)) break;
            stopped = w.ballot(mask, i < end && fn(u, 0u));
          }
          if (base > i0 && w.lane() == lowest_lane(mask)) nbr.cache.count_hit_reads(w, 1);  // one hit a run
          if (stopped) return (base < end ? base : end) - b;
          if (base >= end) {  // the run is done; the list may go on in the next page
            i0 = end;
            continue;
          }
          i0 = base;
        }
      }
      // One pin for the warp (every lane reads the same page), not one per lane.
      shared_page<uint32_t> hn = nbr.page_shared(w, i0);
      if (!hn.ok()) return i0 - b;  // the cache recorded the error; the host reports it
      shared_page<uint32_t> hw;
      if (Weighted) hw = wts.page_shared(w, i0);
      const uint64_t last = hn.first + hn.count;
      const uint64_t end = e < last ? e : last;
      bool stopped = false;
      const bool w_ok = !Weighted || hw.ok();
      if (w_ok) {
        for (uint64_t base = i0; base < end; base += lanes) {
          const uint64_t i = base + rank;
          const bool stop = i < end && fn(hn[i], Weighted ? hw[i] : 0u);
          if (w.ballot(mask, stop)) {
            stopped = true;
            i0 = base + lanes < end ? base + lanes : end;
            break;
          }
        }
      }
      nbr.release_shared(w, hn);
      if (Weighted) wts.release_shared(w, hw);
      if (!w_ok || stopped) return i0 - b;
      i0 = end;
    }
    return e - b;
  }
};

}  // namespace deepwell::graph
