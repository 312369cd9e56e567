// The graph algorithms on the GPU against the CPU references: over device
// memory, over pinned host memory (zero-copy), and through a GPU page cache
// far smaller than the graph (through the controller, and through the file's
// registered mapping), offsets in device memory or through the cache.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "../common/scratch_file.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/gpu_exec.cuh"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/graph/reference.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

struct graph_fixture {
  test::scratch_file file{"graph.dwg"};
  std::string path = file.path();
  csr_graph g;
  csr_view v;
  uint32_t source = 0;
  explicit graph_fixture(unsigned scale) {
    generator_options o;
    o.scale = scale;
    o.degree = 16;
    o.seed = 3;
    o.weighted = true;
    g = generate(o);
    v = view_of(g);
    source = uint32_t(max_degree_node(g.offsets.data(), g.nodes));
    write_csr(path, g);
  }
};

template <class T>
struct device_copy {
  T* p = nullptr;
  explicit device_copy(const std::vector<T>& h) {
    check_cuda(cudaMalloc(&p, h.size() * sizeof(T)), "cudaMalloc");
    check_cuda(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~device_copy() { cudaFree(p); }
};

template <class T>
struct pinned_copy {
  T* p = nullptr;
  explicit pinned_copy(const std::vector<T>& h) {
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&p), h.size() * sizeof(T), cudaHostAllocMapped), "cudaHostAlloc");
    std::memcpy(p, h.data(), h.size() * sizeof(T));
  }
  ~pinned_copy() { cudaFreeHost(p); }
};

// Every node's list read once by whole warps (CC's sweep): per node, a sum
// over its edges of neighbour and weight, to compare with the host's.
struct checksum_step {
  unsigned long long* sums = nullptr;
  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G& g, uint64_t v0) const {
    return for_each_selected(
        w, g, v0, [](uint64_t) { return true; },
        [&](uint32_t x, uint64_t b, uint64_t e, unsigned) -> uint64_t {
          unsigned long long s = 0;
          const uint64_t looked = g.template for_each_edge<true>(w, b, e, [&](uint32_t u, uint32_t wt) {
            s += (unsigned long long)u * 1000003ull + wt;
            return false;
          });
          if (s) client_atomic<unsigned long long>(sums[x]).fetch_add(s, memory_order_relaxed);
          return looked;
        });
  }
};

template <class G>
void check_reads(const G& gv, const graph_fixture& f, unsigned blocks) {
  gpu_exec x(blocks);
  auto sums = x.alloc<unsigned long long>(f.g.nodes);
  x.fill(sums.data(), f.g.nodes, 0ull);
  checksum_step s;
  s.sums = sums.data();
  EXPECT_EQ(x.run(gv, s, f.g.nodes), f.g.edges());
  const std::vector<unsigned long long> got = x.download(sums.data(), f.g.nodes);
  uint64_t bad = 0;
  for (uint64_t v = 0; v < f.g.nodes; ++v) {
    unsigned long long want = 0;
    for (uint64_t i = f.g.offsets[v]; i < f.g.offsets[v + 1]; ++i) want += (unsigned long long)f.g.nbr32[i] * 1000003ull + f.g.wts[i];
    if (got[v] != want && bad++ < 5)
      ADD_FAILURE() << "node " << v << " (degree " << f.g.offsets[v + 1] - f.g.offsets[v] << ", edges from " << f.g.offsets[v]
                    << "): neighbour checksum " << got[v] << ", want " << want;
  }
  EXPECT_EQ(bad, 0u) << "nodes whose lists read back wrong";
}

template <class G>
void check_all(const G& gv, const graph_fixture& f, const char* what, unsigned blocks = 0, uint64_t long_lists = 8192) {
  SCOPED_TRACE(what);
  gpu_exec x(blocks);
  x.set_long_lists(long_lists);
  const std::vector<uint32_t> depth = bfs_reference(f.v, f.source);
  for (const bool dir : {false, true}) {
    bfs_options o;
    o.source = f.source;
    o.direction_optimizing = dir;
    const bfs_result r = bfs(x, gv, o);
    EXPECT_EQ(r.depth, depth) << (dir ? "direction-optimizing BFS" : "top-down BFS");
    EXPECT_EQ(r.stats.bad_ids, 0u);
    if (dir) EXPECT_GT(r.bottom_up_levels, 0u);
  }
  const std::vector<uint32_t> labels = cc_reference(f.v);
  EXPECT_EQ(connected_components(x, gv, f.g.flags).label, labels) << "CC, lower-half reads";
  EXPECT_EQ(connected_components(x, gv, 0u).label, labels) << "CC, every edge";
  pagerank_options po;
  po.iterations = 10;
  const pagerank_result pr = pagerank(x, gv, po);
  const std::vector<double> want = pagerank_reference(f.v, 10);
  double l1 = 0;
  for (size_t i = 0; i < want.size(); ++i) l1 += std::fabs(double(pr.rank[i]) - want[i]);
  EXPECT_LT(l1, 1e-4) << "PageRank L1 distance from the double-precision reference";
  // Every edge once an iteration: no chunk of a long list lost or walked twice.
  EXPECT_EQ(pr.stats.edges_looked, uint64_t(po.iterations) * f.g.edges());
  const sssp_result d = sssp(x, gv, f.source);
  const std::vector<uint64_t> dw = sssp_reference(f.v, f.source);
  ASSERT_EQ(d.dist.size(), dw.size());
  uint64_t wrong = 0;
  for (size_t i = 0; i < dw.size(); ++i) wrong += d.dist[i] != dw[i];
  EXPECT_EQ(wrong, 0u) << "SSSP distances";
}

}  // namespace

TEST(GpuGraph, AlgorithmsInDeviceMemoryMatchTheReferences) {
  const graph_fixture f(16);
  device_copy<uint64_t> off(f.g.offsets);
  device_copy<uint32_t> nbr(f.g.nbr32), wts(f.g.wts);
  check_reads(memory_graph{f.g.nodes, off.p, nbr.p, wts.p}, f, 16);
  check_all(memory_graph{f.g.nodes, off.p, nbr.p, wts.p}, f, "device memory");
  check_all(memory_graph{f.g.nodes, off.p, nbr.p, wts.p}, f, "device memory, 16 blocks", 16);
  check_all(memory_graph{f.g.nodes, off.p, nbr.p, wts.p}, f, "device memory, lists over 16 entries in chunks", 0, 16);
}

TEST(GpuGraph, AlgorithmsOverZeroCopyHostMemoryMatchTheReferences) {
  const graph_fixture f(15);
  pinned_copy<uint64_t> off(f.g.offsets);
  pinned_copy<uint32_t> nbr(f.g.nbr32), wts(f.g.wts);
  check_all(memory_graph{f.g.nodes, off.p, nbr.p, wts.p}, f, "zero-copy");
}

TEST(GpuGraph, AlgorithmsThroughASmallPageCacheMatchTheReferences) {
  const graph_fixture f(18);  // ~25 MiB of edges and as much of weights
  gpu_exec x(16);              // 128 warps: a 16 MiB cache is enough for them
  for (const auto tier : {cache_config::file_tier::never, cache_config::file_tier::resident}) {
    controller ctl;
    cache_config k;
    k.page_size = 4096;
    k.capacity_bytes = uint64_t(x.warps()) * 32 * 4096;  // the least a launch of x.warps() warps may have
    k.direct_files = tier;
    auto cache = make_gpu_page_cache(ctl, k);
    cache->check_capacity(x.warps());
    graph_arrays arrays(cache, csr_file(f.path));
    ASSERT_GT(f.g.edges() * 4, k.capacity_bytes);
    device_copy<uint64_t> off(f.g.offsets);
    check_reads(arrays.view(off.p), f, 16);
    check_all(arrays.view(off.p), f, tier == cache_config::file_tier::never ? "cache via the controller" : "cache via the mapping", 16);
    check_all(arrays.view(), f, "cache, offsets through the cache too", 16);
    check_all(arrays.view(off.p), f, "cache, lists over 16 entries in chunks", 16, 16);
    if (tier == cache_config::file_tier::resident) {
      ASSERT_TRUE(arrays.edges_direct());
      check_all(arrays.view(off.p, true), f, "cache, bottom-up lists read in place", 16);
    }
    const cache_stats s = cache->stats();
    EXPECT_GT(s.evictions, 0u);
    EXPECT_TRUE(cache->last_error().ok()) << describe(cache->last_error());
  }
}
