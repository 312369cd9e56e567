// Beam search over an on-storage index (DiskANN's): each query starts at the
// index's entry node with a list of the `list` nearest candidates seen so
// far by quantised distance; each step takes the `width` nearest candidates
// not yet expanded, reads their records (one page each, through the cache),
// computes their exact distances, and puts their neighbours not yet seen in
// the list by quantised distance. It ends when every candidate in the list
// is expanded (or after max_expansions); the answer is the k expanded nodes
// nearest by exact distance.
//
// The search is defined by sets and a total order (distance, then id), not
// by the order work is done in, and its distances are computed to the same
// bits on CPU and GPU (distance.hpp): CPU and GPU clients give the same ids
// and distances for the same index and queries.
#pragma once
#include <cstdint>
#include <limits>

#include "deepwell/vectors/format.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::vectors {

struct search_options {
  uint32_t k = 10;
  uint32_t list = 64;   // candidates kept (>= k)
  uint32_t width = 4;   // records read a step (the beam)
  uint32_t max_expansions = 0;  // 0: 2 * list
};

inline constexpr uint32_t no_neighbour = std::numeric_limits<uint32_t>::max();

// What a search did, summed over its queries.
struct search_counts {
  uint64_t expansions = 0;   // records read
  uint64_t distances = 0;    // quantised distances computed
  uint64_t bad_ids = 0;      // neighbour ids past the index (a corrupt record)
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

// Searches `nq` queries (nq x dim float32, host memory) with CPU threads
// reading through the view's cache (a host page cache): ids and distances
// are nq x k (no_neighbour / +inf where fewer than k were found).
search_counts search_cpu(const index_view& v, const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                         float* distances, unsigned threads = 0);

}  // namespace deepwell::vectors
