// Generators, the edge-list-to-CSR builder and symmetrize.
//
// The builder makes two passes over an edge source that can produce edge i
// on demand (generators recompute it from i; lists index their arrays):
// count degrees, then scatter into place; then each list is sorted and
// deduplicated and the lists are packed. Scatter order depends on thread
// timing, sorting removes that, so the output is deterministic.
#include "deepwell/graph/build.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include <unistd.h>

#include "deepwell/common/detail/hash.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/graph/parallel.hpp"

namespace deepwell::graph {

namespace {

// The generators' hash: a seed gives the same graph in every version.
constexpr uint64_t mix64(uint64_t x) { return ::deepwell::detail::splitmix64_mix(x); }

// A bijection of [0, 2^bits): multiply by an odd number and xor-shift, each
// invertible modulo 2^bits. Kronecker generators permute ids so that node
// numbers carry no information about degree (Graph500 does the same).
struct id_permutation {
  uint64_t mask, m1, m2, k1, k2;
  unsigned s1, s2;
  id_permutation(unsigned bits, uint64_t seed)
      : mask(bits >= 64 ? ~0ull : (uint64_t(1) << bits) - 1),
        m1(mix64(seed ^ 0x5851f42d4c957f2dull) | 1),
        m2(mix64(seed ^ 0x14057b7ef767814full) | 1),
        k1(mix64(seed ^ 0x9e3779b97f4a7c15ull)),
        k2(mix64(seed ^ 0xd1b54a32d192ed03ull)),
        s1((bits + 1) / 2),
        s2(bits / 2 + 1) {}
  uint64_t operator()(uint64_t x) const {
    x = (x * m1 + k1) & mask;
    x ^= x >> s1;
    x = (x * m2 + k2) & mask;
    x ^= x >> s2;
    return x;
  }
};

template <class Id>
std::vector<Id>& nbrs(csr_graph& g);
template <>
std::vector<uint32_t>& nbrs<uint32_t>(csr_graph& g) { return g.nbr32; }
template <>
std::vector<uint64_t>& nbrs<uint64_t>(csr_graph& g) { return g.nbr64; }

// at(i, u, v, w) -> false to skip edge i. both: also store v->u.
template <class Id, class EdgeAt>
csr_graph build(uint64_t nodes, uint64_t count, EdgeAt&& at, bool both, bool keep_loops, weight_type wt,
                unsigned threads, progress* p) {
  threads = detail::thread_count(threads);
  const bool weighted = wt != weight_type::none;
  csr_graph g;
  g.nodes = nodes;
  g.id_bytes = sizeof(Id);
  g.weights = wt;

  // 1. Degrees.
  std::vector<uint64_t> cursor(nodes + 1, 0);
  if (p) p->phase("count degrees", count);
  detail::parallel_for(count, threads, [&](unsigned, uint64_t b, uint64_t e) {
    uint64_t u, v;
    uint32_t w;
    for (uint64_t i = b; i < e; ++i) {
      if ((i & 0xFFFFF) == 0 && p) p->advance(std::min<uint64_t>(0x100000, e - i));
      if (!at(i, u, v, w) || (u == v && !keep_loops)) continue;
      std::atomic_ref<uint64_t>(cursor[u]).fetch_add(1, std::memory_order_relaxed);
      if (both && u != v) std::atomic_ref<uint64_t>(cursor[v]).fetch_add(1, std::memory_order_relaxed);
    }
  });
  uint64_t total = 0;
  for (uint64_t v = 0; v < nodes; ++v) {
    const uint64_t d = cursor[v];
    cursor[v] = total;
    total += d;
  }
  cursor[nodes] = total;
  std::vector<uint64_t> start(cursor);

  // 2. Scatter.
  std::vector<Id> raw(total);
  std::vector<uint32_t> raw_w(weighted ? total : 0);
  if (p) p->phase("place edges", count);
  detail::parallel_for(count, threads, [&](unsigned, uint64_t b, uint64_t e) {
    uint64_t u, v;
    uint32_t w = 0;
    for (uint64_t i = b; i < e; ++i) {
      if ((i & 0xFFFFF) == 0 && p) p->advance(std::min<uint64_t>(0x100000, e - i));
      if (!at(i, u, v, w) || (u == v && !keep_loops)) continue;
      uint64_t k = std::atomic_ref<uint64_t>(cursor[u]).fetch_add(1, std::memory_order_relaxed);
      raw[k] = Id(v);
      if (weighted) raw_w[k] = w;
      if (both && u != v) {
        k = std::atomic_ref<uint64_t>(cursor[v]).fetch_add(1, std::memory_order_relaxed);
        raw[k] = Id(u);
        if (weighted) raw_w[k] = w;
      }
    }
  });
  cursor.clear();
  cursor.shrink_to_fit();

  // 3. Sort and deduplicate each list in place; its new length in deg.
  std::vector<uint64_t> deg(nodes);
  if (p) p->phase("sort lists", nodes);
  detail::parallel_for(nodes, threads, [&](unsigned, uint64_t b, uint64_t e) {
    std::vector<std::pair<Id, uint32_t>> tmp;
    for (uint64_t v = b; v < e; ++v) {
      if ((v & 0xFFFF) == 0 && p) p->advance(std::min<uint64_t>(0x10000, e - v));
      Id* first = raw.data() + start[v];
      const uint64_t n = start[v + 1] - start[v];
      if (!weighted) {
        std::sort(first, first + n);
        deg[v] = uint64_t(std::unique(first, first + n) - first);
        continue;
      }
      uint32_t* wf = raw_w.data() + start[v];
      tmp.resize(n);
      for (uint64_t i = 0; i < n; ++i) tmp[i] = {first[i], wf[i]};
      std::sort(tmp.begin(), tmp.end());
      uint64_t k = 0;
      for (uint64_t i = 0; i < n; ++i) {
        if (k && tmp[i].first == first[k - 1]) continue;  // sorted: the first copy has the smallest weight
        first[k] = tmp[i].first;
        wf[k] = tmp[i].second;
        ++k;
      }
      deg[v] = k;
    }
  });

  // 4. Pack.
  g.offsets.resize(nodes + 1);
  uint64_t m = 0;
  for (uint64_t v = 0; v < nodes; ++v) {
    g.offsets[v] = m;
    m += deg[v];
  }
  g.offsets[nodes] = m;
  std::vector<Id>& out = nbrs<Id>(g);
  if (m == total) {
    out = std::move(raw);
    if (weighted) g.wts = std::move(raw_w);
  } else {
    out.resize(m);
    if (weighted) g.wts.resize(m);
    if (p) p->phase("pack", nodes);
    detail::parallel_for(nodes, threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t v = b; v < e; ++v) {
        std::copy_n(raw.data() + start[v], deg[v], out.data() + g.offsets[v]);
        if (weighted) std::copy_n(raw_w.data() + start[v], deg[v], g.wts.data() + g.offsets[v]);
      }
    });
  }
  g.flags = csr_sorted | (keep_loops ? 0u : csr_simple) | (both ? csr_symmetric : 0u);
  if (p) p->done();
  return g;
}

}  // namespace

uint32_t generated_weight(uint64_t u, uint64_t v, uint64_t seed) {
  const uint64_t lo = std::min(u, v), hi = std::max(u, v);
  return 1 + uint32_t(mix64(mix64(lo ^ seed) + hi) % 255);
}

csr_graph generate(const generator_options& o, progress* p) {
  if (o.scale == 0 || o.scale > 40) throw error("generate: scale " + std::to_string(o.scale) + " (must be 1 to 40)");
  if (o.degree == 0 || o.degree > 1024)
    throw error("generate: degree " + std::to_string(o.degree) + " (must be 1 to 1024)");
  if (o.id_bytes != 4 && o.id_bytes != 8) throw error("generate: id width must be 4 or 8 bytes");
  if (o.id_bytes == 4 && o.scale > 32) throw error("generate: scale " + std::to_string(o.scale) + " needs 8-byte ids");
  if (!(o.a > 0 && o.b >= 0 && o.c >= 0 && o.a + o.b + o.c < 1))
    throw error("generate: R-MAT probabilities a, b, c must be non-negative (a > 0) and sum below 1");
  const uint64_t nodes = uint64_t(1) << o.scale;
  const uint64_t count = uint64_t(o.degree) << o.scale;
  const uint64_t mask = nodes - 1;
  const uint64_t seed = mix64(o.seed ^ 0x6a09e667f3bcc909ull);
  const id_permutation perm(o.scale, o.seed);
  const double ab = o.a + o.b, abc = o.a + o.b + o.c;
  const unsigned scale = o.scale;
  const bool kron = o.kind == generator_options::kind_t::kron;
  const bool weighted = o.weighted;
  const uint64_t wseed = o.seed;
  auto at = [&](uint64_t i, uint64_t& u, uint64_t& v, uint32_t& w) {
    const uint64_t base = seed + i * 0x9e3779b97f4a7c15ull;
    if (kron) {
      u = v = 0;
      for (unsigned l = 0; l < scale; ++l) {
        const double x = double(mix64(base + l) >> 11) * 0x1.0p-53;
        const unsigned ub = x >= ab, vb = (x >= o.a && x < ab) || x >= abc;
        u = u << 1 | ub;
        v = v << 1 | vb;
      }
      u = perm(u);
      v = perm(v);
    } else {
      u = mix64(base) & mask;
      v = mix64(base ^ 0xa0761d6478bd642full) & mask;
    }
    w = weighted ? generated_weight(u, v, wseed) : 0;
    return true;
  };
  const weight_type wt = o.weighted ? weight_type::u32 : weight_type::none;
  csr_graph g = o.id_bytes == 4 ? build<uint32_t>(nodes, count, at, o.symmetric, false, wt, o.threads, p)
                                : build<uint64_t>(nodes, count, at, o.symmetric, false, wt, o.threads, p);
  g.seed = o.seed;
  g.origin = std::string(kron ? "kron" : "uniform") + " scale=" + std::to_string(o.scale) +
             " degree=" + std::to_string(o.degree) + " seed=" + std::to_string(o.seed);
  return g;
}

namespace {

// Ids are dense (0 to nodes - 1): the offsets and the degree counts beside
// them take 16 bytes a node, so one stray huge id asks for far more memory
// than the machine has. Named here, not left to end in std::bad_alloc.
void check_node_memory(const edge_list& e) {
  const long double need = ((long double)e.nodes + 1) * 16 + (long double)e.src.size() * 16;
  const long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
  if (page <= 0 || pages <= 0) return;
  const long double have = (long double)page * pages;
  if (need <= have) return;
  char text[160];
  std::snprintf(text, sizeof text, "%.1Lf GiB of memory, more than this machine's %.1Lf GiB", need / (1ull << 30),
                have / (1ull << 30));
  throw error((e.origin.empty() ? std::string("the edge list") : e.origin) + ": its largest node id makes " +
              std::to_string(e.nodes) + " nodes (ids are 0 to nodes - 1, and every id up to the largest is a node), " +
              "whose offsets take " + text + "; renumber the ids densely");
}

}  // namespace

csr_graph build_csr(const edge_list& e, const build_options& o, progress* p) {
  const uint64_t count = e.src.size();
  check_node_memory(e);
  if (e.dst.size() != count || (e.weights != weight_type::none && e.w.size() != count))
    throw error("build_csr: edge list arrays differ in length");
  for (uint64_t i = 0; i < count; ++i)
    if (e.src[i] >= e.nodes || e.dst[i] >= e.nodes)
      throw error("build_csr: edge " + std::to_string(i) + " (" + std::to_string(e.src[i]) + " -> " +
                  std::to_string(e.dst[i]) + ") has an id out of range (" + std::to_string(e.nodes) + " nodes)");
  uint32_t id_bytes = o.id_bytes ? o.id_bytes : (e.nodes <= (uint64_t(1) << 32) ? 4 : 8);
  if (id_bytes != 4 && id_bytes != 8) throw error("build_csr: id width must be 4 or 8 bytes");
  if (id_bytes == 4 && e.nodes > (uint64_t(1) << 32))
    throw error("build_csr: " + std::to_string(e.nodes) + " nodes need 8-byte ids");
  const bool both = o.symmetrize || e.symmetric_input;
  const bool weighted = e.weights != weight_type::none;
  auto at = [&](uint64_t i, uint64_t& u, uint64_t& v, uint32_t& w) {
    u = e.src[i];
    v = e.dst[i];
    w = weighted ? e.w[i] : 0;
    return true;
  };
  csr_graph g = id_bytes == 4 ? build<uint32_t>(e.nodes, count, at, both, o.keep_self_loops, e.weights, o.threads, p)
                              : build<uint64_t>(e.nodes, count, at, both, o.keep_self_loops, e.weights, o.threads, p);
  // A list marked symmetric only when we made it so (a general edge list may
  // happen to be symmetric; we do not claim what we did not check).
  if (!both) g.flags &= ~csr_symmetric;
  g.origin = e.origin;
  return g;
}

csr_graph symmetrize(const csr_graph& in, unsigned threads, progress* p) {
  const uint64_t m = in.edges();
  const bool weighted = in.weights != weight_type::none;
  auto at = [&](uint64_t i, uint64_t& u, uint64_t& v, uint32_t& w) {
    u = uint64_t(std::upper_bound(in.offsets.begin(), in.offsets.end(), i) - in.offsets.begin()) - 1;
    v = in.neighbour(i);
    w = weighted ? in.wts[i] : 0;
    return true;
  };
  const bool loops = !(in.flags & csr_simple);
  csr_graph g = in.id_bytes == 4 ? build<uint32_t>(in.nodes, m, at, true, loops, in.weights, threads, p)
                                 : build<uint64_t>(in.nodes, m, at, true, loops, in.weights, threads, p);
  g.seed = in.seed;
  g.origin = in.origin.substr(0, 50) + " (symmetrized)";
  return g;
}

}  // namespace deepwell::graph
