// The algorithms' per-warp steps, written once for GPU warps and CPU threads
// (the cache's warp policies, warp.hpp). A step processes the chunk of nodes
// [v0, v0 + lanes) of one warp (32 nodes on a GPU, 1 on a CPU thread): the
// lanes test their own node, then the whole warp walks each selected node's
// neighbour list together (for_each_edge in edges.hpp). A step returns the
// edges it looked at (for "bytes the algorithm needed").
//
// State arrays live in memory the threads address directly (device memory
// for GPU steps); every shared access is a relaxed atomic (libcu++), which on
// the GPU is a plain load or store and keeps the CPU tests race-free.
#pragma once
#include <cuda/std/bit>
#include <cstdint>

#include "deepwell/graph/edges.hpp"
#include "deepwell/shared_atomic.hpp"

namespace deepwell::graph {

inline constexpr uint32_t not_reached = 0xFFFFFFFFu;

struct step_counters {
  unsigned long long changed = 0;  // nodes discovered / labels or distances lowered
  unsigned long long bad_ids = 0;  // neighbour ids >= nodes (a corrupt file)
  double sum = 0;                  // PageRank: rank of dangling nodes
};

template <class T>
DW_HD DW_FORCEINLINE T ld(const T& x) {
  return client_atomic<T>(const_cast<T&>(x)).load(memory_order_relaxed);
}
template <class T>
DW_HD DW_FORCEINLINE void st(T& x, T v) {
  client_atomic<T>(x).store(v, memory_order_relaxed);
}

// A double summed over the lanes of mask (every lane gets the total).
template <class Warp>
DW_HD double warp_sum(const Warp& w, unsigned mask, double x) {
  const uint64_t bits = cuda::std::bit_cast<uint64_t>(x);
  double total = 0;
  for (unsigned m = mask; m; m &= m - 1) total += cuda::std::bit_cast<double>(shfl64(w, mask, bits, lowest_lane(m)));
  return total;
}

DW_HD inline void count(unsigned long long* counter, uint32_t mine) {
  if (mine) client_atomic<unsigned long long>(*counter).fetch_add(mine, memory_order_relaxed);
}

// fn(u, weight) for neighbour ids in range; an id >= n (a corrupt file) is
// counted in `bad` and skipped, so no step indexes its arrays with it.
template <class Fn>
DW_HD auto in_range(uint64_t n, uint32_t& bad, Fn&& fn) {
  return [&, n](uint32_t u, uint32_t wt) -> bool {
    if (u >= n) {
      ++bad;
      return false;
    }
    return fn(u, wt);
  };
}

// The warp's chunk of nodes [v0, v0 + lanes): each lane tests its own node
// with select(v); then, for each selected node x in lane order, the whole
// warp calls body(x, begin, end, lane of x) with x's edge range. Returns
// the sum of body's results (edges looked at).
template <class Warp, class G, class Select, class Body>
DW_HD uint64_t for_each_selected(const Warp& w, const G& g, uint64_t v0, Select&& select, Body&& body) {
  const unsigned mask = w.active();
  const uint64_t v = v0 + lane_rank(w, mask);
  const bool mine = v < g.nodes() && select(v);
  const unsigned act = w.ballot(mask, mine);
  if (!act) return 0;
  uint64_t b, e;
  g.range(w, mine, v, b, e);
  uint64_t looked = 0;
  for (unsigned m = act; m; m &= m - 1) {
    const unsigned src = lowest_lane(m);
    const uint64_t vb = shfl64(w, mask, b, src), ve = shfl64(w, mask, e, src);
    looked += body(w.shfl(mask, uint32_t(v), src), vb, ve, src);
  }
  return looked;
}

// ---- BFS (level-synchronous; top-down or bottom-up per level) ----
struct bfs_step {
  uint32_t* depth = nullptr;
  uint32_t level = 0;
  bool bottom_up = false;
  step_counters* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t n = g.nodes();
    uint32_t found = 0, bad = 0;
    const uint64_t looked =
        bottom_up ? bottom_up_chunk(w, g, v0, found, bad)
                  : for_each_selected(
                        w, g, v0, [&](uint64_t v) { return ld(depth[v]) == level; },
                        [&](uint32_t, uint64_t b, uint64_t e, unsigned) -> uint64_t {
                          // Claim every unreached neighbour.
                          return g.template for_each_edge<false>(w, b, e, in_range(n, bad, [&](uint32_t u, uint32_t) {
                            uint32_t expect = not_reached;
                            if (ld(depth[u]) == not_reached &&
                                client_atomic<uint32_t>(depth[u]).compare_exchange_strong(expect, level + 1,
                                                                                         memory_order_relaxed))
                              ++found;
                            return false;
                          }));
                        });
    count(&c->changed, found);
    count(&c->bad_ids, bad);
    return looked;
  }

  // Each unreached node of the chunk looks for a parent in the frontier
  // and stops at the first. Every lane first checks its own node's first
  // entries (G::peek: one read each, every lane's in flight at once); only
  // the nodes with no parent among them have their lists walked by the
  // whole warp, one after another (one-touch reads). Returns the entries
  // looked at, the warp's total in every lane.
  template <class Warp, class G>
  DW_HD uint64_t bottom_up_chunk(const Warp& w, const G& g, uint64_t v0, uint32_t& found, uint32_t& bad) const {
    const uint64_t n = g.nodes();
    const unsigned mask = w.active();
    const uint64_t v = v0 + lane_rank(w, mask);
    const bool mine = v < n && ld(depth[v]) == not_reached;
    if (!w.ballot(mask, mine)) return 0;
    uint64_t b, e;
    g.range(w, mine, v, b, e);
    uint32_t words[4];
    unsigned skip = 0;
    const unsigned got = mine ? g.peek(b, e, words, skip) : 0;
    uint32_t d[4];
#pragma unroll
    for (unsigned j = 0; j < 4; ++j) {  // the depth loads, all in flight together
      const bool ours = j >= skip && j < skip + got;
      if (ours && words[j] >= n) ++bad;
      d[j] = ours && words[j] < n ? ld(depth[words[j]]) : not_reached;
    }
    bool parent = false;
#pragma unroll
    for (unsigned j = 0; j < 4; ++j) parent |= d[j] == level;
    if (parent) {
      st(depth[v], level + 1);
      ++found;
    }
    // The entries peeked, summed over the warp (got is at most 4).
    uint64_t looked = popcount32(w.ballot(mask, got & 1)) + 2 * popcount32(w.ballot(mask, got & 2)) +
                      4 * popcount32(w.ballot(mask, got & 4));
    const uint64_t rest_b = b + got;
    for (unsigned m = w.ballot(mask, mine && !parent && rest_b < e); m; m &= m - 1) {
      const unsigned src = lowest_lane(m);
      const uint64_t vb = shfl64(w, mask, rest_b, src), ve = shfl64(w, mask, e, src);
      bool hit = false;
      looked += g.template for_each_edge<false, true>(w, vb, ve, in_range(n, bad, [&](uint32_t u, uint32_t) {
        hit = ld(depth[u]) == level;
        return hit;
      }));
      if (w.ballot(mask, hit) && w.lane() == src) {
        st(depth[v], level + 1);
        ++found;
      }
    }
    return looked;
  }
};

// ---- connected components (union-find with path halving; ECL-CC's hooking) ----
// parent[] starts as the identity; a root is hooked under a smaller root, so
// after the final find every label is the smallest id of its component.
struct cc_step {
  uint32_t* parent = nullptr;
  bool lower_half = false;  // symmetric and sorted lists: only edges to smaller ids (a prefix of each list)
  step_counters* c = nullptr;

  DW_HD static uint32_t find(uint32_t* p, uint32_t x) {
    for (;;) {
      const uint32_t px = ld(p[x]);
      if (px == x) return x;
      const uint32_t gp = ld(p[px]);
      if (gp != px) st(p[x], gp);  // halving: gp is an ancestor of x, so this only shortens the path
      x = gp;
    }
  }
  DW_HD static void unite(uint32_t* p, uint32_t a, uint32_t b) {
    for (;;) {
      a = find(p, a);
      b = find(p, b);
      if (a == b) return;
      if (a < b) {
        const uint32_t t = a;
        a = b;
        b = t;
      }
      uint32_t expect = a;  // hook the larger root a under b, if a is still a root
      if (client_atomic<uint32_t>(p[a]).compare_exchange_strong(expect, b, memory_order_relaxed)) return;
    }
  }

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t n = g.nodes();
    uint32_t bad = 0;
    const uint64_t looked = for_each_selected(
        w, g, v0, [](uint64_t) { return true; },
        [&](uint32_t x, uint64_t b, uint64_t e, unsigned) -> uint64_t {
          return g.template for_each_edge<false>(w, b, e, in_range(n, bad, [&](uint32_t u, uint32_t) {
            if (lower_half && u > x) return true;
            if (u != x) unite(parent, x, u);
            return false;
          }));
        });
    count(&c->bad_ids, bad);
    return looked;
  }
};

// Every node's label becomes its root.
struct cc_finish_step {
  uint32_t* parent = nullptr;
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t v = v0 + lane_rank(w, w.active());
    if (v < g.nodes()) st(parent[v], cc_step::find(parent, uint32_t(v)));
    return 0;
  }
};

// ---- PageRank (push) ----
// Before each iteration: contrib[v] = rank[v] / degree(v), dangling rank summed.
struct pr_prepare_step {
  const float* rank = nullptr;
  float* contrib = nullptr;
  uint32_t* degree = nullptr;  // filled on the first call (first = true)
  bool first = false;
  step_counters* c = nullptr;
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t v = v0 + lane_rank(w, mask);
    const bool mine = v < g.nodes();
    if (first) {
      uint64_t b, e;
      g.range(w, mine, v, b, e);
      if (mine) degree[v] = uint32_t(e - b);
    }
    double dangling = 0;
    if (mine) {
      const uint32_t d = degree[v];
      contrib[v] = d ? rank[v] / float(d) : 0.f;
      if (!d) dangling = rank[v];
    }
    const double total = warp_sum(w, mask, dangling);
    if (total != 0 && w.lane() == lowest_lane(mask))
      client_atomic<double>(c->sum).fetch_add(total, memory_order_relaxed);
    return 0;
  }
};

struct pr_push_step {
  const float* contrib = nullptr;
  const uint32_t* degree = nullptr;
  float* next = nullptr;
  step_counters* c = nullptr;
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t n = g.nodes();
    uint32_t bad = 0;
    const uint64_t looked = for_each_selected(
        w, g, v0, [&](uint64_t v) { return degree[v] != 0; },
        [&](uint32_t x, uint64_t b, uint64_t e, unsigned) -> uint64_t {
          const float cx = contrib[x];
          return g.template for_each_edge<false>(w, b, e, in_range(n, bad, [&](uint32_t u, uint32_t) {
            client_atomic<float>(next[u]).fetch_add(cx, memory_order_relaxed);
            return false;
          }));
        });
    count(&c->bad_ids, bad);
    return looked;
  }
};

// rank <- (1 - d) / n + d * (next + dangling / n); next <- 0.
struct pr_update_step {
  float* rank = nullptr;
  float* next = nullptr;
  float base = 0, damping = 0, dangling_share = 0;  // dangling_share = d * dangling / n
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t v = v0 + lane_rank(w, w.active());
    if (v < g.nodes()) {
      rank[v] = base + damping * ld(next[v]) + dangling_share;
      st(next[v], 0.f);
    }
    return 0;
  }
};

// ---- SSSP (Bellman-Ford over a frontier of nodes whose distance fell) ----
struct sssp_step {
  unsigned long long* dist = nullptr;
  const uint32_t* active = nullptr;
  uint32_t* next_active = nullptr;
  step_counters* c = nullptr;
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const uint64_t n = g.nodes();
    uint32_t lowered = 0, bad = 0;
    const uint64_t looked = for_each_selected(
        w, g, v0, [&](uint64_t v) { return ld(active[v]) != 0; },
        [&](uint32_t x, uint64_t b, uint64_t e, unsigned) -> uint64_t {
          const unsigned long long dx = ld(dist[x]);
          return g.template for_each_edge<true>(w, b, e, in_range(n, bad, [&](uint32_t u, uint32_t wt) {
            const unsigned long long nd = dx + wt;
            if (nd < ld(dist[u]) &&
                client_atomic<unsigned long long>(dist[u]).fetch_min(nd, memory_order_relaxed) > nd) {
              st(next_active[u], 1u);
              ++lowered;
            }
            return false;
          }));
        });
    count(&c->changed, lowered);
    count(&c->bad_ids, bad);
    return looked;
  }
};

}  // namespace deepwell::graph
