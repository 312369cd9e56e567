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
#include <concepts>
#include <cstdint>

#include "deepwell/graph/edges.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell::graph {

inline constexpr uint32_t not_reached = 0xFFFFFFFFu;

struct step_counters {
  unsigned long long changed = 0;  // nodes discovered / labels or distances lowered
  unsigned long long bad_ids = 0;  // neighbour ids >= nodes (a corrupt file)
  double sum = 0;                  // PageRank: rank of dangling nodes
  // BFS's direction choice: the edges of the nodes a bottom-up level found
  // (or of the frontier, bfs_edges_step), and of the nodes not reached yet.
  unsigned long long frontier_edges = 0;
  unsigned long long unreached_edges = 0;
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

// x summed over the lanes `lanes` (a subset of mask; every lane of mask
// calls and gets the total).
template <class Warp>
DW_HD uint64_t warp_total(const Warp& w, unsigned mask, unsigned lanes, uint64_t x) {
  uint64_t total = 0;
  for (unsigned m = lanes; m; m &= m - 1) total += shfl64(w, mask, x, lowest_lane(m));
  return total;
}
// x summed over the lanes of mask; only lanes with a nonzero value shuffle.
template <class Warp>
DW_HD uint64_t warp_sum_u64(const Warp& w, unsigned mask, uint64_t x) {
  return warp_total(w, mask, w.ballot(mask, x != 0), x);
}

// Adds the warp's total once (from its lowest lane), not once a lane.
template <class Warp>
DW_HD void count_warp(const Warp& w, unsigned mask, unsigned long long* counter, uint64_t mine) {
  const uint64_t total = warp_sum_u64(w, mask, mine);
  if (total && w.lane() == lowest_lane(mask))
    client_atomic<unsigned long long>(*counter).fetch_add(total, memory_order_relaxed);
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

// ---- long lists, shared by the grid ----
// A list walked by one warp holds its level up until it is done, and a
// Kronecker graph's hub has millions of entries (BFS's first level is that
// one list: tens of ms on one warp). A step that has `lists` (a
// long_list_queue the executor fills in) queues its lists longer than
// `threshold` entries instead of walking them; when the step's kernel is
// done, the executor runs long_list_step, in which every warp takes chunks
// of `chunk` entries of the queued lists and walks them with the step's own
// list() (told whether the chunk continues a list: CC's lower half stops
// early).
struct long_list {
  uint64_t b = 0, e = 0;
  uint64_t first_chunk = 0;  // the chunks of the lists queued before it
  uint32_t x = 0;            // the list's node
};

struct long_list_queue {
  static constexpr unsigned count_shift = 40;  // head: (lists queued << 40) + chunks queued
  static constexpr uint64_t chunk_mask = (1ull << count_shift) - 1;
  long_list* lists = nullptr;  // nullptr: no queue, every list is walked by its warp
  unsigned long long* head = nullptr;
  uint32_t capacity = 0;
  uint32_t chunk = 2048;      // entries a warp takes at a time
  uint64_t threshold = 8192;  // lists longer than this are queued

  DW_HD bool wants(uint64_t b, uint64_t e) const { return lists && e - b > threshold; }

  // The executors' default chunk: a quarter of the threshold, at most 2048.
  static uint32_t default_chunk(uint64_t threshold) {
    return uint32_t(threshold / 4 > 2048 ? 2048 : threshold / 4 ? threshold / 4 : 1);
  }

  // Queues node x's [b, e) (the same arguments in every lane of mask;
  // every lane calls). False when the queue is full: the warp walks the
  // list itself. One atomic a list; a list's slot and first chunk come
  // from the same add, so the queue is in chunk order.
  template <class Warp>
  DW_HD bool push(const Warp& w, unsigned mask, uint32_t x, uint64_t b, uint64_t e) const {
    const unsigned lead = lowest_lane(mask);
    uint64_t old = 0;
    if (w.lane() == lead) {
      client_atomic<unsigned long long> h(*head);
      // Full already: no add (the count must not run into the chunk bits).
      old = (h.load(memory_order_relaxed) >> count_shift) >= capacity
                ? ~0ull
                : h.fetch_add((1ull << count_shift) + (e - b + chunk - 1) / chunk, memory_order_relaxed);
    }
    old = shfl64(w, mask, old, lead);
    if (old == ~0ull || (old >> count_shift) >= capacity) return false;
    if (w.lane() == lead) lists[old >> count_shift] = long_list{b, e, old & chunk_mask, x};
    return true;
  }
};

// Whether a step queues its long lists (has a long_list_queue `lists` and a
// list(w, g, x, b, e, found, bad, continues) the chunks are walked with).
template <class S>
concept splits_long_lists = requires(S s) {
  { s.lists } -> std::convertible_to<long_list_queue>;
};

// The warp's chunk of nodes [v0, v0 + lanes): each lane tests its own node
// with select(v); then, for each selected node x in lane order, the whole
// warp calls body(x, begin, end, lane of x) with x's edge range, or queues
// the range in q when it is long (q.wants). Returns the sum of body's
// results (edges looked at).
template <class Warp, class G, class Select, class Body>
DW_HD uint64_t for_each_selected(const Warp& w, const G& g, uint64_t v0, const long_list_queue& q, Select&& select,
                                 Body&& body) {
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
    const uint32_t x = w.shfl(mask, uint32_t(v), src);
    if (q.wants(vb, ve) && q.push(w, mask, x, vb, ve)) continue;
    looked += body(x, vb, ve, src);
  }
  return looked;
}
template <class Warp, class G, class Select, class Body>
DW_HD uint64_t for_each_selected(const Warp& w, const G& g, uint64_t v0, Select&& select, Body&& body) {
  return for_each_selected(w, g, v0, long_list_queue{}, select, body);
}

// A step's walk of the warp's chunk: the selected nodes' lists through the
// step's own list() (long ones queued in its `lists`), what the lists
// changed and the bad ids they met counted in its counters. Returns the
// edges looked at.
template <class Step, class Warp, class G, class Select>
DW_HD uint64_t walk_selected_lists(const Step& s, const Warp& w, const G& g, uint64_t v0, Select&& select) {
  uint32_t changed = 0, bad = 0;
  const uint64_t looked =
      for_each_selected(w, g, v0, s.lists, select, [&](uint32_t x, uint64_t b, uint64_t e, unsigned) {
        return s.list(w, g, x, b, e, changed, bad);
      });
  count(&s.c->changed, changed);
  count(&s.c->bad_ids, bad);
  return looked;
}

// The queued lists' chunks: the executor runs it over chunks x lanes ids
// (one chunk a warp at a time); each warp finds its chunk's list (a binary
// search of the queue, which is in chunk order) and walks its part of it
// with the step's list().
template <class Step>
struct long_list_step {
  Step s;
  const long_list* lists = nullptr;
  uint64_t count = 0;   // lists in the queue (0: nothing to walk)
  uint32_t chunk = 0;
  uint64_t chunks = 0;  // chunk ids to run it over (times the executor's lanes)

  // The walk of what step s queued in q, from q's head word once s's kernel
  // is done. Its chunks are walked, never queued again.
  static long_list_step after(const Step& s, const long_list_queue& q, unsigned long long head) {
    const uint64_t queued = head >> long_list_queue::count_shift;
    long_list_step ls{s, q.lists, queued < q.capacity ? queued : q.capacity, q.chunk,
                      queued ? head & long_list_queue::chunk_mask : 0};
    ls.s.lists = long_list_queue{};
    return ls;
  }

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t k = v0 / popcount32(mask);  // the executor gives a warp `lanes` ids a chunk
    uint64_t lo = 0, hi = count;               // lists[0].first_chunk == 0 <= k
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (lists[mid].first_chunk <= k) lo = mid; else hi = mid;
    }
    const long_list l = lists[lo];
    const uint64_t b = l.b + (k - l.first_chunk) * chunk;
    if (b >= l.e) return 0;  // past the last list (chunks of lists the full queue refused)
    const uint64_t e = l.e - b < chunk ? l.e : b + chunk;
    uint32_t found = 0, bad = 0;
    const uint64_t looked = s.list(w, g, l.x, b, e, found, bad, b != l.b);
    count_warp(w, mask, &s.c->changed, found);
    count_warp(w, mask, &s.c->bad_ids, bad);
    return looked;
  }
};

// ---- BFS (level-synchronous; top-down or bottom-up per level) ----
struct bfs_step {
  uint32_t* depth = nullptr;
  uint32_t level = 0;
  bool bottom_up = false;
  step_counters* c = nullptr;
  long_list_queue lists{};

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    if (!bottom_up) return walk_selected_lists(*this, w, g, v0, [&](uint64_t v) { return ld(depth[v]) == level; });
    uint32_t found = 0, bad = 0;
    const uint64_t looked = bottom_up_chunk(w, g, v0, found, bad);
    count(&c->changed, found);
    count(&c->bad_ids, bad);
    return looked;
  }

  // Top-down: [b, e) of a frontier node's list claims every unreached
  // neighbour.
  template <class Warp, class G>
  DW_HD uint64_t list(const Warp& w, const G& g, uint32_t, uint64_t b, uint64_t e, uint32_t& found,
                      uint32_t& bad, bool = false) const {
    const uint64_t n = g.nodes();
    return g.template for_each_edge<false>(w, b, e, in_range(n, bad, [&](uint32_t u, uint32_t) {
      uint32_t expect = not_reached;
      if (ld(depth[u]) == not_reached &&
          client_atomic<uint32_t>(depth[u]).compare_exchange_strong(expect, level + 1, memory_order_relaxed))
        ++found;
      return false;
    }));
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
    uint64_t found_edges = 0;  // the found nodes' degrees: the next frontier's edges
    if (parent) {
      st(depth[v], level + 1);
      ++found;
      found_edges = e - b;
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
        found_edges = e - b;
      }
    }
    count_warp(w, mask, &c->frontier_edges, found_edges);
    return looked;
  }
};

// The edges of the frontier (nodes at depth `level`) and, with
// count_unreached, of the nodes not reached yet: what BFS's direction choice
// weighs (algorithms.hpp). Reads only the offsets of the nodes it counts.
struct bfs_edges_step {
  const uint32_t* depth = nullptr;
  uint32_t level = 0;
  bool count_unreached = false;
  step_counters* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t v = v0 + lane_rank(w, mask);
    const uint32_t d = v < g.nodes() ? ld(depth[v]) : level + 1;
    const bool in_frontier = d == level, unreached = count_unreached && d == not_reached;
    uint64_t b, e;
    g.range(w, in_frontier || unreached, v, b, e);  // collective: every lane calls it
    count_warp(w, mask, &c->frontier_edges, in_frontier ? e - b : 0);
    count_warp(w, mask, &c->unreached_edges, unreached ? e - b : 0);
    return 0;
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

  long_list_queue lists{};

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    return walk_selected_lists(*this, w, g, v0, [](uint64_t) { return true; });
  }

  // [b, e) of node x's list, or a chunk of it (`continues`: not its first).
  // The lower half is the list's prefix, so a chunk past it stops at its
  // first entry; that entry is looked at in place first where the graph
  // can (peek: memory, or the direct tier's mapping), so such a chunk does
  // not fetch its page.
  template <class Warp, class G>
  DW_HD uint64_t list(const Warp& w, const G& g, uint32_t x, uint64_t b, uint64_t e, uint32_t&,
                      uint32_t& bad, bool continues = false) const {
    if (lower_half && continues) {
      uint32_t words[4];
      unsigned skip = 0;
      if (g.peek(b, e, words, skip) && words[skip] > x) return 1;  // the same b in every lane: one read
    }
    return g.template for_each_edge<false>(w, b, e, in_range(g.nodes(), bad, [&](uint32_t u, uint32_t) {
      if (lower_half && u > x) return true;
      if (u != x) unite(parent, x, u);
      return false;
    }));
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
  long_list_queue lists{};
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    return walk_selected_lists(*this, w, g, v0, [&](uint64_t v) { return degree[v] != 0; });
  }
  template <class Warp, class G>
  DW_HD uint64_t list(const Warp& w, const G& g, uint32_t x, uint64_t b, uint64_t e, uint32_t&,
                      uint32_t& bad, bool = false) const {
    const float cx = contrib[x];
    return g.template for_each_edge<false>(w, b, e, in_range(g.nodes(), bad, [&](uint32_t u, uint32_t) {
      client_atomic<float>(next[u]).fetch_add(cx, memory_order_relaxed);
      return false;
    }));
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
  long_list_queue lists{};
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    return walk_selected_lists(*this, w, g, v0, [&](uint64_t v) { return ld(active[v]) != 0; });
  }
  // Relaxes [b, e) of node x's list; `lowered` counts the distances it lowered.
  template <class Warp, class G>
  DW_HD uint64_t list(const Warp& w, const G& g, uint32_t x, uint64_t b, uint64_t e, uint32_t& lowered,
                      uint32_t& bad, bool = false) const {
    const unsigned long long dx = ld(dist[x]);
    return g.template for_each_edge<true>(w, b, e, in_range(g.nodes(), bad, [&](uint32_t u, uint32_t wt) {
      const unsigned long long nd = dx + wt;
      if (nd < ld(dist[u]) && client_atomic<unsigned long long>(dist[u]).fetch_min(nd, memory_order_relaxed) > nd) {
        st(next_active[u], 1u);
        ++lowered;
      }
      return false;
    }));
  }
};

}  // namespace deepwell::graph
