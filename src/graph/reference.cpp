// Sequential reference algorithms (tests only; clarity over speed).
#include "deepwell/graph/reference.hpp"

#include <algorithm>
#include <numeric>
#include <queue>

#include "deepwell/common/error.hpp"

namespace deepwell::graph {

csr_view view_of(const csr_graph& g) {
  if (g.id_bytes != 4) throw error("graph algorithms need 4-byte node ids");
  return csr_view{g.nodes, g.edges(), g.offsets.data(), g.nbr32.data(),
                  g.weights == weight_type::none ? nullptr : g.wts.data(), g.weights, g.flags};
}

csr_view view_of(const csr_file& f) {
  return csr_view{f.nodes(), f.edges(), f.offsets(), f.neighbours32(), f.weights(), f.header().weights,
                  f.header().flags};
}

std::vector<uint32_t> bfs_reference(const csr_view& g, uint32_t source) {
  std::vector<uint32_t> depth(g.nodes, unreached);
  std::queue<uint32_t> q;
  depth[source] = 0;
  q.push(source);
  while (!q.empty()) {
    const uint32_t v = q.front();
    q.pop();
    for (uint64_t i = g.offsets[v]; i < g.offsets[v + 1]; ++i) {
      const uint32_t u = g.neighbours[i];
      if (depth[u] == unreached) {
        depth[u] = depth[v] + 1;
        q.push(u);
      }
    }
  }
  return depth;
}

std::vector<uint32_t> cc_reference(const csr_view& g) {
  std::vector<uint32_t> parent(g.nodes);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (uint64_t v = 0; v < g.nodes; ++v)
    for (uint64_t i = g.offsets[v]; i < g.offsets[v + 1]; ++i) {
      uint32_t a = find(uint32_t(v)), b = find(g.neighbours[i]);
      if (a == b) continue;
      if (a < b) std::swap(a, b);
      parent[a] = b;  // the smaller id stays the root
    }
  for (uint64_t v = 0; v < g.nodes; ++v) parent[v] = find(uint32_t(v));
  return parent;
}

std::vector<double> pagerank_reference(const csr_view& g, unsigned iterations, double damping) {
  const double n = double(g.nodes);
  std::vector<double> pr(g.nodes, 1.0 / n), next(g.nodes);
  for (unsigned it = 0; it < iterations; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    double dangling = 0;
    for (uint64_t v = 0; v < g.nodes; ++v) {
      const uint64_t d = g.offsets[v + 1] - g.offsets[v];
      if (d == 0) {
        dangling += pr[v];
        continue;
      }
      const double c = pr[v] / double(d);
      for (uint64_t i = g.offsets[v]; i < g.offsets[v + 1]; ++i) next[g.neighbours[i]] += c;
    }
    for (uint64_t v = 0; v < g.nodes; ++v) pr[v] = (1 - damping) / n + damping * (next[v] + dangling / n);
  }
  return pr;
}

std::vector<uint64_t> sssp_reference(const csr_view& g, uint32_t source) {
  if (g.weight_kind != weight_type::u32) throw error("SSSP needs uint32 edge weights (generate with --weights)");
  std::vector<uint64_t> dist(g.nodes, infinite_distance);
  using item = std::pair<uint64_t, uint32_t>;
  std::priority_queue<item, std::vector<item>, std::greater<item>> q;
  dist[source] = 0;
  q.push({0, source});
  while (!q.empty()) {
    const auto [d, v] = q.top();
    q.pop();
    if (d != dist[v]) continue;
    for (uint64_t i = g.offsets[v]; i < g.offsets[v + 1]; ++i) {
      const uint32_t u = g.neighbours[i];
      const uint64_t nd = d + g.weights[i];
      if (nd < dist[u]) {
        dist[u] = nd;
        q.push({nd, u});
      }
    }
  }
  return dist;
}

}  // namespace deepwell::graph
