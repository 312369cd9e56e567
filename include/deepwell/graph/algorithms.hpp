// BFS, connected components, PageRank and SSSP: host drivers written once
// over an executor (cpu_exec.hpp: CPU threads; gpu_exec.cuh: GPU warps) and
// a graph view (edges.hpp: memory_graph or cached_graph). The executor owns
// the state arrays and runs steps (steps.hpp) over all nodes.
//
// Executor interface: alloc<T>(n) -> buffer with data(); fill(p, n, v);
// iota(p, n); set(p, v); download(p, n) -> std::vector<T>;
// counters() (step_counters* the steps update); reset_counters();
// read_counters(); run(g, step, n) -> edges looked at (returns when done).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/graph/csr_format.hpp"
#include "deepwell/graph/steps.hpp"

namespace deepwell::graph {

struct run_stats {
  double seconds = 0;      // the algorithm itself (state set up and results copied out excluded)
  uint64_t edges_looked = 0;
  uint64_t iterations = 0; // BFS levels, SSSP rounds, PageRank iterations
  uint64_t bad_ids = 0;    // neighbour ids out of range met (0 unless the file is corrupt)
};

namespace detail {
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
inline void check_source(uint64_t source, uint64_t n) {
  if (source >= n)
    throw error("source node " + std::to_string(source) + " is out of range (the graph has " + std::to_string(n) +
                " nodes)");
}
}  // namespace detail

// ---- BFS ----
// Direction-optimizing (Beamer et al., SC 2012, with GAP's constants): a
// level runs top-down (the frontier's lists claim their unreached
// neighbours) until a growing frontier's edges exceed the unreached nodes'
// edges / alpha, then bottom-up (each unreached node looks for a parent) until
// the frontier shrinks below nodes / beta. Weighing edges, not nodes, is
// what sends a Kronecker graph's second level bottom-up: a hub's
// neighbours are few nodes but most of the edges, and reading all their
// lists is most of the graph.
struct bfs_options {
  uint32_t source = 0;
  bool direction_optimizing = true;  // bottom-up levels while the frontier is large
  double alpha = 15;                 // bottom-up once frontier edges > unreached edges / alpha
  double beta = 18;                  // top-down again once a shrinking frontier < nodes / beta
  // > 0: the rule before 2026-11-28 instead, bottom-up while the frontier
  // holds more than this fraction of the nodes (no edge counts).
  double bottom_up_fraction = 0;
};
struct bfs_level {
  bool bottom_up = false;
  uint64_t frontier = 0;  // nodes at this level
  uint64_t edges_looked = 0;
  double seconds = 0;
};
struct bfs_result {
  std::vector<uint32_t> depth;  // not_reached for nodes the source does not reach
  uint64_t reached = 0;
  unsigned bottom_up_levels = 0;
  uint64_t bottom_up_edges = 0;  // edges looked at in bottom-up levels (one-touch reads)
  std::vector<bfs_level> levels;  // where the time went
  run_stats stats;
};

// The direction rule above, level by level; the plain BFS and the
// recoverable one (recoverable_bfs.hpp) use the same. `choose` decides a
// level (counting the frontier's edges with bfs_edges_step when a top-down
// level found it), `record` takes the level's counters. A BFS resumed from
// a state starts one afresh: the first count then takes the unreached
// nodes' edges too, and the frontier counts as growing.
class bfs_direction {
 public:
  bfs_direction(bool enabled, double alpha, double beta, double fraction = 0)
      : enabled_(enabled), alpha_(alpha), beta_(beta), fraction_(fraction) {
    if (!(alpha > 0) || !(beta > 0)) throw error("bfs: alpha and beta must be positive");
    if (!(fraction >= 0 && fraction <= 1)) throw error("bfs: bottom_up_fraction must be between 0 and 1");
  }

  template <class Exec, class G>
  bool choose(Exec& x, const G& g, uint32_t* depth, uint32_t level, uint64_t frontier) {
    if (!enabled_) return false;
    if (fraction_ > 0) return bottom_up_ = double(frontier) > fraction_ * double(g.nodes());
    const bool growing = frontier > last_frontier_;
    if (!bottom_up_) {
      // A top-down level found the frontier: count its edges (only when it
      // grew, as only then may the level go bottom-up; a skipped count
      // leaves unreached_ high, which only delays going bottom-up).
      if (!frontier_edges_known_ && growing) {
        bfs_edges_step es;
        es.depth = depth;
        es.level = level;
        es.count_unreached = !unreached_known_;
        es.c = x.counters();
        x.reset_counters();
        x.run(g, es, g.nodes());
        const step_counters c = x.read_counters();
        frontier_edges_ = c.frontier_edges;
        if (!unreached_known_)
          unreached_ = c.unreached_edges;
        else
          unreached_ -= frontier_edges_ < unreached_ ? frontier_edges_ : unreached_;
        unreached_known_ = true;
      }
      bottom_up_ = growing && unreached_known_ && double(frontier_edges_) > double(unreached_) / alpha_;
    } else {
      bottom_up_ = growing || double(frontier) > double(g.nodes()) / beta_;
    }
    last_frontier_ = frontier;
    return bottom_up_;
  }

  // After the level choose() decided: a bottom-up level counted the edges
  // of the nodes it found (the next frontier's).
  void record(const step_counters& c) {
    frontier_edges_known_ = bottom_up_ && unreached_known_;
    if (frontier_edges_known_) {
      frontier_edges_ = c.frontier_edges;
      unreached_ -= frontier_edges_ < unreached_ ? frontier_edges_ : unreached_;
    }
  }

 private:
  bool enabled_;
  double alpha_, beta_, fraction_;
  bool bottom_up_ = false;
  bool frontier_edges_known_ = false, unreached_known_ = false;
  uint64_t last_frontier_ = 0, frontier_edges_ = 0, unreached_ = 0;
};

template <class Exec, class G>
bfs_result bfs(Exec& x, const G& g, const bfs_options& o) {
  const uint64_t n = g.nodes();
  detail::check_source(o.source, n);
  bfs_direction dir(o.direction_optimizing, o.alpha, o.beta, o.bottom_up_fraction);
  auto depth = x.template alloc<uint32_t>(n);
  x.fill(depth.data(), n, not_reached);
  x.set(depth.data() + o.source, 0u);
  bfs_result r;
  r.reached = 1;
  uint64_t frontier = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t level = 0;; ++level) {
    bfs_step s;
    s.depth = depth.data();
    s.level = level;
    s.bottom_up = dir.choose(x, g, depth.data(), level, frontier);
    s.c = x.counters();
    x.reset_counters();
    const auto tl = std::chrono::steady_clock::now();
    const uint64_t looked = x.run(g, s, n);
    r.levels.push_back({s.bottom_up, frontier, looked, detail::seconds_since(tl)});
    r.stats.edges_looked += looked;
    if (s.bottom_up) r.bottom_up_edges += looked;
    const step_counters c = x.read_counters();
    dir.record(c);
    r.stats.bad_ids += c.bad_ids;
    r.bottom_up_levels += s.bottom_up;
    ++r.stats.iterations;
    frontier = c.changed;
    r.reached += frontier;
    if (frontier == 0) break;
  }
  r.stats.seconds = detail::seconds_since(t0);
  r.depth = x.download(depth.data(), n);
  return r;
}

// ---- connected components ----
struct cc_result {
  std::vector<uint32_t> label;  // the smallest node id of each node's component
  uint64_t components = 0;
  run_stats stats;
};

// `flags`: the file's csr_flags; a symmetric graph with sorted lists reads
// only the part of each list below the node (every edge is seen once).
template <class Exec, class G>
cc_result connected_components(Exec& x, const G& g, uint32_t flags) {
  const uint64_t n = g.nodes();
  auto parent = x.template alloc<uint32_t>(n);
  x.iota(parent.data(), n);
  cc_result r;
  const auto t0 = std::chrono::steady_clock::now();
  cc_step s;
  s.parent = parent.data();
  s.lower_half = (flags & csr_symmetric) && (flags & csr_sorted);
  s.c = x.counters();
  x.reset_counters();
  r.stats.edges_looked = x.run(g, s, n);
  cc_finish_step f;
  f.parent = parent.data();
  x.run(g, f, n);
  r.stats.bad_ids = x.read_counters().bad_ids;
  r.stats.iterations = 1;
  r.stats.seconds = detail::seconds_since(t0);
  r.label = x.download(parent.data(), n);
  for (uint64_t v = 0; v < n; ++v) r.components += r.label[v] == v;
  return r;
}

// ---- PageRank ----
struct pagerank_options {
  unsigned iterations = 20;
  double damping = 0.85;
};
struct pagerank_result {
  std::vector<float> rank;
  run_stats stats;
};

template <class Exec, class G>
pagerank_result pagerank(Exec& x, const G& g, const pagerank_options& o) {
  const uint64_t n = g.nodes();
  if (o.iterations == 0) throw error("pagerank: iterations must be at least 1");
  if (!(o.damping > 0 && o.damping < 1)) throw error("pagerank: damping must be between 0 and 1");
  auto rank = x.template alloc<float>(n);
  auto next = x.template alloc<float>(n);
  auto contrib = x.template alloc<float>(n);
  auto degree = x.template alloc<uint32_t>(n);
  x.fill(rank.data(), n, float(1.0 / double(n)));
  x.fill(next.data(), n, 0.f);
  pagerank_result r;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned it = 0; it < o.iterations; ++it) {
    x.reset_counters();
    pr_prepare_step p;
    p.rank = rank.data();
    p.contrib = contrib.data();
    p.degree = degree.data();
    p.first = it == 0;
    p.c = x.counters();
    r.stats.edges_looked += x.run(g, p, n);
    pr_push_step s;
    s.contrib = contrib.data();
    s.degree = degree.data();
    s.next = next.data();
    s.c = x.counters();
    r.stats.edges_looked += x.run(g, s, n);
    const step_counters c = x.read_counters();
    r.stats.bad_ids += c.bad_ids;
    pr_update_step u;
    u.rank = rank.data();
    u.next = next.data();
    u.base = float((1 - o.damping) / double(n));
    u.damping = float(o.damping);
    u.dangling_share = float(o.damping * c.sum / double(n));
    x.run(g, u, n);
    ++r.stats.iterations;
  }
  r.stats.seconds = detail::seconds_since(t0);
  r.rank = x.download(rank.data(), n);
  return r;
}

// ---- SSSP ----
struct sssp_result {
  std::vector<unsigned long long> dist;  // ~0 for nodes the source does not reach
  run_stats stats;
};

template <class Exec, class G>
sssp_result sssp(Exec& x, const G& g, uint32_t source) {
  const uint64_t n = g.nodes();
  detail::check_source(source, n);
  auto dist = x.template alloc<unsigned long long>(n);
  auto a = x.template alloc<uint32_t>(n);
  auto b = x.template alloc<uint32_t>(n);
  x.fill(dist.data(), n, ~0ull);
  x.set(dist.data() + source, 0ull);
  x.fill(a.data(), n, 0u);
  x.set(a.data() + source, 1u);
  uint32_t* active = a.data();
  uint32_t* next = b.data();
  sssp_result r;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    x.fill(next, n, 0u);
    x.reset_counters();
    sssp_step s;
    s.dist = dist.data();
    s.active = active;
    s.next_active = next;
    s.c = x.counters();
    r.stats.edges_looked += x.run(g, s, n);
    const step_counters c = x.read_counters();
    r.stats.bad_ids += c.bad_ids;
    ++r.stats.iterations;
    if (c.changed == 0) break;
    std::swap(active, next);
  }
  r.stats.seconds = detail::seconds_since(t0);
  r.dist = x.download(dist.data(), n);
  return r;
}

}  // namespace deepwell::graph
