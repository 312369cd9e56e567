// CPU reference implementations, written plainly for the tests to check the
// GPU (and CPU-client) algorithms against: BFS depths, connected components
// labelled by their smallest node id, PageRank, Dijkstra distances.
#pragma once
#include <cstdint>
#include <vector>

#include "deepwell/graph/csr_file.hpp"

namespace deepwell::graph {

// A read-only view of a graph with 4-byte ids, in host memory or a mapped file.
struct csr_view {
  uint64_t nodes = 0, edges = 0;
  const uint64_t* offsets = nullptr;
  const uint32_t* neighbours = nullptr;
  const uint32_t* weights = nullptr;  // raw bits; nullptr when none
  weight_type weight_kind = weight_type::none;
  uint32_t flags = 0;
};
csr_view view_of(const csr_graph& g);  // throws unless ids are 4 bytes
csr_view view_of(const csr_file& f);

inline constexpr uint32_t unreached = 0xFFFFFFFFu;
inline constexpr uint64_t infinite_distance = ~0ull;

std::vector<uint32_t> bfs_reference(const csr_view& g, uint32_t source);
// Weakly connected components: label[v] = the smallest node id in v's component.
std::vector<uint32_t> cc_reference(const csr_view& g);
// Push PageRank: pr <- (1 - d) / n + d * (sum over in-edges of pr[u] / outdeg(u) + dangling / n),
// starting from 1/n, `iterations` times.
std::vector<double> pagerank_reference(const csr_view& g, unsigned iterations, double damping = 0.85);
// Dijkstra over uint32 weights; throws unless the graph has uint32 weights.
std::vector<uint64_t> sssp_reference(const csr_view& g, uint32_t source);

}  // namespace deepwell::graph
