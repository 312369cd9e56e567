// Beam search over an on-storage index (DiskANN's): each query starts at the
// index's entry node or the nearest of a sample (entry_sample), with a list
// of the `list` nearest candidates seen so far by quantised distance; each step takes the `width` nearest candidates
// not yet expanded and fetches their records through the cache. With
// whole_pages (the default) a fetch brings the record's whole page, and
// every record in hand is used, as Starling's block search does: each gets
// its exact distance (a candidate for the answer); those not yet seen that
// are nearer the query than the record picked in their page join the list
// by quantised distance (all of them with all_mates), the others count as
// seen; and every record in hand that is then in the list unexpanded is
// expanded with the picked ones, without a fetch of its own. Expanding a
// node puts its neighbours not yet seen in the list by quantised distance.
// A page is never fetched twice for a query: after its step, each of its
// records is expanded or out of the list for good (a node seen once never
// joins the list again). It ends when every candidate in the list is
// expanded (or after max_expansions nodes); the answer is the k nodes with
// exact distances nearest the query.
//
// The search is defined by sets and a total order (distance, then id), not
// by the order work is done in, and its distances are computed to the same
// bits on CPU and GPU (distance.hpp): CPU and GPU clients give the same ids
// and distances for the same index and queries.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#include "deepwell/vectors/format.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::vectors {

struct search_options {
  uint32_t k = 10;
  uint32_t list = 64;   // candidates kept (>= k)
  uint32_t width = 4;   // candidates fetched a step (the beam)
  uint32_t max_expansions = 0;  // nodes expanded at most; 0: 2 * list (4 * list with whole_pages)
  bool whole_pages = true;      // use every record of a page fetched (false: the picked record only)
  bool all_mates = false;       // with whole_pages: every unseen record in hand joins the list, not only the nearer
  // Where a query starts: 0, the index's entry node (its medoid); N, the
  // nearest by quantised distance of that node and N nodes spread evenly
  // over the index (ids j * count / N, every node where N >= count: the
  // layout keeps neighbourhoods together, so they span the graph). At most
  // max_entry_sample. A start near the query cuts the nodes a search
  // expands before it converges (bench/results: 1,024 at 1 M and 10 M).
  uint32_t entry_sample = 1024;
};

inline constexpr uint32_t max_entry_sample = 65536;

inline constexpr uint32_t no_neighbour = std::numeric_limits<uint32_t>::max();

// What a search did, summed over its queries.
struct search_counts {
  uint64_t expansions = 0;   // nodes expanded
  uint64_t distances = 0;    // quantised distances computed
  uint64_t bad_ids = 0;      // neighbour ids past the index (a corrupt record)
  uint64_t fetches = 0;      // records (pages, with whole_pages) fetched through the cache
  uint64_t page_mates = 0;   // of the expansions, nodes in a page fetched for another

  search_counts& operator+=(const search_counts& o) {
    expansions += o.expansions;
    distances += o.distances;
    bad_ids += o.bad_ids;
    fetches += o.fetches;
    page_mates += o.page_mates;
    return *this;
  }
};

// What kernels and CPU threads take by value.
struct index_view {
  index_header h{};
  array_ref<uint8_t> records{};   // the records section through the cache
  const float* codebook = nullptr;  // pq_subspaces x 256 x pq_sub_dim
  const uint8_t* codes = nullptr;   // count x pq_subspaces
  const uint32_t* labels = nullptr; // count: what a search answers for a node
};

// The checks every search makes of its options, naming the problem.
void check_search_options(const index_header& h, const search_options& o);

// Records a fetch puts in hand: a page's, or one.
inline uint32_t records_a_fetch(const index_header& h, const search_options& o) {
  return o.whole_pages ? h.records_per_page : 1u;
}

// The nodes a search expands at most.
inline uint32_t search_cap(const search_options& o) {
  return o.max_expansions ? o.max_expansions : (o.whole_pages ? 4 : 2) * o.list;
}

// A query's seen set: a power of two of slots, at least twice the ids a
// search can see (the entry, every record fetched, every expanded node's
// neighbours).
inline uint32_t search_seen_slots(const index_header& h, const search_options& o) {
  const uint64_t most = 1 + uint64_t(search_cap(o)) * (h.degree + records_a_fetch(h, o));
  return uint32_t(std::bit_ceil(std::max<uint64_t>(1024, 2 * most)));
}

// The nodes of a query's entry sample: entry_sample, at most the index's.
inline uint32_t entry_sample_size(const index_header& h, const search_options& o) {
  return uint32_t(std::min<uint64_t>(o.entry_sample, h.count));
}

// Node j of a query's entry sample of n (j < n): spread evenly over the ids.
DW_HD inline uint32_t entry_sample_node(const index_header& h, uint32_t n, uint32_t j) {
  return uint32_t(uint64_t(j) * h.count / n);
}

// Searches `nq` queries (nq x dim float32, host memory) with CPU threads
// reading through the view's cache (a host page cache): ids and distances
// are nq x k (no_neighbour / +inf where fewer than k were found).
search_counts search_cpu(const index_view& v, const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                         float* distances, unsigned threads = 0);

}  // namespace deepwell::vectors
