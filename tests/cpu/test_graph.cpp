// Graph tools (format, generators, converters, symmetrize, bad files), the
// CPU references, and the algorithms themselves run by CPU threads: over
// plain memory and through a small deepwell page cache (the same step code
// the GPU runs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <string>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/checked_runs.hpp"
#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/graph/reference.hpp"
#include "test_util.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

using test::scratch_file;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream o(path);
  o << text;
}

using test::expect_error;

bool has_edge(const csr_graph& g, uint64_t u, uint64_t v) {
  const auto b = g.nbr32.begin() + int64_t(g.offsets[u]), e = g.nbr32.begin() + int64_t(g.offsets[u + 1]);
  return std::binary_search(b, e, uint32_t(v));
}

generator_options kron(unsigned scale, bool weighted = false) {
  generator_options o;
  o.scale = scale;
  o.degree = 8;
  o.seed = 7;
  o.weighted = weighted;
  return o;
}

}  // namespace

// ---- generators ----

TEST(GraphGenerate, DeterministicWhateverTheThreadCount) {
  generator_options o = kron(12, true);
  o.threads = 1;
  const csr_graph a = generate(o);
  o.threads = 5;
  const csr_graph b = generate(o);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.nbr32, b.nbr32);
  EXPECT_EQ(a.wts, b.wts);
  o.seed = 8;
  EXPECT_NE(generate(o).nbr32, a.nbr32);
}

TEST(GraphGenerate, KroneckerIsSymmetricSimpleSortedAndSkewed) {
  const csr_graph g = generate(kron(12, true));
  ASSERT_EQ(g.nodes, 4096u);
  EXPECT_EQ(g.flags, csr_symmetric | csr_sorted | csr_simple);
  EXPECT_GT(g.edges(), 4096u * 8);  // both directions of most of the 32768 generated edges
  uint64_t max_deg = 0;
  for (uint64_t u = 0; u < g.nodes; ++u) {
    max_deg = std::max(max_deg, g.offsets[u + 1] - g.offsets[u]);
    for (uint64_t i = g.offsets[u]; i < g.offsets[u + 1]; ++i) {
      const uint32_t v = g.nbr32[i];
      ASSERT_NE(v, u) << "self loop";
      if (i > g.offsets[u]) ASSERT_LT(g.nbr32[i - 1], v) << "unsorted or duplicate";
      ASSERT_TRUE(has_edge(g, v, u)) << u << "->" << v << " without its reverse";
      ASSERT_EQ(g.wts[i], generated_weight(u, v, g.seed));
      ASSERT_GE(g.wts[i], 1u);
      ASSERT_LE(g.wts[i], 255u);
    }
  }
  // R-MAT's skew: the largest degree far above the mean; uniform graphs are flat.
  EXPECT_GT(double(max_deg), 10 * double(g.edges()) / double(g.nodes));
  generator_options u = kron(12);
  u.kind = generator_options::kind_t::uniform;
  const csr_graph ug = generate(u);
  uint64_t umax = 0;
  for (uint64_t v = 0; v < ug.nodes; ++v) umax = std::max(umax, ug.offsets[v + 1] - ug.offsets[v]);
  EXPECT_LT(double(umax), 3 * double(ug.edges()) / double(ug.nodes));
}

TEST(GraphGenerate, BadOptionsAreErrors) {
  generator_options o = kron(0);
  expect_error([&] { generate(o); }, "scale 0");
  o = kron(33);
  expect_error([&] { generate(o); }, "8-byte ids");
  o = kron(4);
  o.a = 0.9;
  expect_error([&] { generate(o); }, "sum below 1");
  o = kron(4);
  o.degree = 0;
  expect_error([&] { generate(o); }, "degree 0");
}

TEST(GraphGenerate, EightByteIdsMatchFourByteIds) {
  generator_options o = kron(10);
  const csr_graph a = generate(o);
  o.id_bytes = 8;
  const csr_graph b = generate(o);
  ASSERT_EQ(a.offsets, b.offsets);
  for (uint64_t i = 0; i < a.edges(); ++i) ASSERT_EQ(a.nbr32[i], b.nbr64[i]);
}

// ---- the file ----

TEST(GraphFile, WriteOpenLoadRoundTrip) {
  scratch_file f("rt.dwg");
  const csr_graph g = generate(kron(11, true));
  write_csr(f.path(), g);
  csr_file file(f.path());
  EXPECT_EQ(file.nodes(), g.nodes);
  EXPECT_EQ(file.edges(), g.edges());
  EXPECT_TRUE(file.symmetric());
  EXPECT_EQ(file.header().offsets_at % csr_section_align, 0u);
  EXPECT_EQ(file.header().neighbours_at % csr_section_align, 0u);
  EXPECT_EQ(file.header().weights_at % csr_section_align, 0u);
  EXPECT_NO_THROW(file.check(3));
  const csr_graph back = file.load();
  EXPECT_EQ(back.offsets, g.offsets);
  EXPECT_EQ(back.nbr32, g.nbr32);
  EXPECT_EQ(back.wts, g.wts);
  EXPECT_EQ(std::string(file.header().origin), g.origin);
  const csr_stats s = file.stats(2);
  EXPECT_EQ(s.self_loops, 0u);
  EXPECT_GT(s.max_degree, 0u);
}

TEST(GraphFile, BadFilesGetClearErrors) {
  scratch_file f("bad.dwg");
  ::unlink(f.path().c_str());
  expect_error([&] { csr_file x(f.path()); }, f.path());  // missing
  write_text(f.path(), "1 2\n2 3\n");
  expect_error([&] { csr_file x(f.path()); }, "truncated");  // shorter than a header
  std::string junk(8192, 'x');
  write_text(f.path(), junk);
  expect_error([&] { csr_file x(f.path()); }, "wrong magic");

  const csr_graph g = generate(kron(10));
  write_csr(f.path(), g);
  {
    csr_file ok(f.path());
    EXPECT_NO_THROW(ok.check());
  }
  const uint64_t full = csr_file(f.path()).header().file_bytes;
  ASSERT_EQ(::truncate(f.path().c_str(), off_t(full - 100)), 0);
  expect_error([&] { csr_file x(f.path()); }, "truncated");

  // An id out of range, then a decreasing offset: open succeeds, check names the spot.
  write_csr(f.path(), g);
  const csr_header h = csr_file(f.path()).header();
  const int fd = ::open(f.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint32_t bad_id = 5000;
  ASSERT_EQ(::pwrite(fd, &bad_id, 4, off_t(h.neighbours_at + 4 * 10)), 4);
  {
    csr_file x(f.path());
    expect_error([&] { x.check(); }, "points to node 5000, out of range");
  }
  const uint32_t fine = 1;
  ASSERT_EQ(::pwrite(fd, &fine, 4, off_t(h.neighbours_at + 4 * 10)), 4);
  const uint64_t backwards = 3;
  ASSERT_EQ(::pwrite(fd, &backwards, 8, off_t(h.offsets_at + 8 * 500)), 8);
  {
    csr_file x(f.path());
    expect_error([&] { x.check(); }, "not monotone");
    expect_error([&] { x.check_offsets(); }, "offsets of node 499 run from");
  }
  // An offset past the edges (node 499's list would run off the neighbours).
  const uint64_t far = uint64_t(1) << 40;
  ASSERT_EQ(::pwrite(fd, &far, 8, off_t(h.offsets_at + 8 * 500)), 8);
  {
    csr_file x(f.path());
    expect_error([&] { x.check_offsets(2); }, "to " + std::to_string(far) + " (not monotone or past");
  }
  const uint64_t wrong_total = 1;
  ASSERT_EQ(::pwrite(fd, &wrong_total, 8, off_t(h.offsets_at + 8 * h.nodes)), 8);
  expect_error([&] { csr_file x(f.path()); }, "the header says");
  const uint32_t bad_width = 3;
  ASSERT_EQ(::pwrite(fd, &bad_width, 4, off_t(offsetof(csr_header, id_bytes))), 4);
  expect_error([&] { csr_file x(f.path()); }, "id width 3");
  ::close(fd);
}

// ---- converters ----

TEST(GraphConvert, SnapEdgeListWithCommentsAndWeights) {
  scratch_file t("snap.txt");
  write_text(t.path(),
             "# Directed graph: test\n"
             "# FromNodeId\tToNodeId\n"
             "0\t1\t5\n"
             "1 2 7\n"
             "\n"
             "% another comment style\n"
             "2 0 1\n"
             "2 0 9\n"    // a duplicate: the smaller weight stays
             "3 3 4\n");  // a self loop: dropped
  const edge_list e = read_edge_list(t.path());
  EXPECT_EQ(e.nodes, 4u);
  EXPECT_EQ(e.src.size(), 5u);
  EXPECT_EQ(e.weights, weight_type::u32);
  const csr_graph g = build_csr(e, {});
  EXPECT_EQ(g.offsets, (std::vector<uint64_t>{0, 1, 2, 3, 3}));
  EXPECT_EQ(g.nbr32, (std::vector<uint32_t>{1, 2, 0}));
  EXPECT_EQ(g.wts, (std::vector<uint32_t>{5, 7, 1}));
  EXPECT_FALSE(g.flags & csr_symmetric);
  build_options so;
  so.symmetrize = true;
  const csr_graph s = build_csr(e, so);
  EXPECT_TRUE(s.flags & csr_symmetric);
  EXPECT_EQ(s.offsets, (std::vector<uint64_t>{0, 2, 4, 6, 6}));
  EXPECT_EQ(s.nbr32, (std::vector<uint32_t>{1, 2, 0, 2, 0, 1}));
  EXPECT_EQ(s.wts, (std::vector<uint32_t>{5, 1, 5, 7, 1, 7}));
  // symmetrize() of the directed CSR gives the same graph.
  const csr_graph s2 = symmetrize(g);
  EXPECT_EQ(s2.offsets, s.offsets);
  EXPECT_EQ(s2.nbr32, s.nbr32);
  EXPECT_EQ(s2.wts, s.wts);
}

TEST(GraphConvert, MatrixMarketGeneralAndSymmetric) {
  scratch_file t("m.mtx");
  write_text(t.path(),
             "%%MatrixMarket matrix coordinate real symmetric\n"
             "% comment\n"
             "3 3 2\n"
             "2 1 0.5\n"
             "3 2 1.25\n");
  const edge_list e = read_edge_list(t.path());
  EXPECT_TRUE(e.symmetric_input);
  EXPECT_EQ(e.weights, weight_type::f32);
  const csr_graph g = build_csr(e, {});
  EXPECT_TRUE(g.flags & csr_symmetric);
  EXPECT_EQ(g.nbr32, (std::vector<uint32_t>{1, 0, 2, 1}));
  float w;
  std::memcpy(&w, &g.wts[2], 4);
  EXPECT_EQ(w, 1.25f);

  write_text(t.path(), "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 1\n");
  const csr_graph p = build_csr(read_edge_list(t.path()), {});
  EXPECT_EQ(p.nbr32, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(p.weights, weight_type::none);
}

TEST(GraphConvert, BadTextNamesTheLine) {
  scratch_file t("bad.txt");
  write_text(t.path(), "0 1\n1 x\n");
  expect_error([&] { read_edge_list(t.path()); }, ":2: node id 'x'");
  write_text(t.path(), "0 1\n1 2 3\n");
  expect_error([&] { read_edge_list(t.path()); }, ":2: has 3 fields");
  write_text(t.path(), "0 -1\n");
  expect_error([&] { read_edge_list(t.path()); }, "negative node id");
  // A binary file given as an edge list: its bytes are shown escaped, not raw.
  write_text(t.path(), std::string("0 \x01\xfe" "7\n", 6));
  expect_error([&] { read_edge_list(t.path()); }, "node id '\\x01\\xfe7' is not");
  write_text(t.path(), "# only comments\n");
  expect_error([&] { read_edge_list(t.path()); }, "no edges");
  write_text(t.path(), "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 3\n");
  expect_error([&] { read_edge_list(t.path()); }, ":3: entry (1, 3) outside");
  write_text(t.path(), "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n");
  expect_error([&] { read_edge_list(t.path()); }, "truncated");
  write_text(t.path(), "%%MatrixMarket matrix array real general\n");
  expect_error([&] { read_edge_list(t.path()); }, "coordinate");
  expect_error([&] { read_edge_list(t.path() + ".missing"); }, ".missing");
}

// ---- references on graphs small enough to check by hand ----

TEST(GraphReference, HandCheckedAnswers) {
  // 0-1-2-3 path (weights 4, 1, 1), 0-3 shortcut (weight 10), 4-5 apart, 6 alone.
  edge_list e;
  e.nodes = 7;
  e.src = {0, 1, 2, 0, 4};
  e.dst = {1, 2, 3, 3, 5};
  e.w = {4, 1, 1, 10, 2};
  e.weights = weight_type::u32;
  build_options o;
  o.symmetrize = true;
  const csr_graph g = build_csr(e, o);
  const csr_view v = view_of(g);
  EXPECT_EQ(bfs_reference(v, 0), (std::vector<uint32_t>{0, 1, 2, 1, unreached, unreached, unreached}));
  EXPECT_EQ(cc_reference(v), (std::vector<uint32_t>{0, 0, 0, 0, 4, 4, 6}));
  EXPECT_EQ(sssp_reference(v, 0),
            (std::vector<uint64_t>{0, 4, 5, 6, infinite_distance, infinite_distance, infinite_distance}));
  const std::vector<double> pr = pagerank_reference(v, 30);
  double sum = 0;
  for (double x : pr) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-9);
  EXPECT_NEAR(pr[4], pr[5], 1e-12);  // symmetric pair
  EXPECT_GT(pr[1], pr[6]);           // a connected node outranks an isolated one
}

// ---- the algorithms, run by CPU threads ----

namespace {

struct graph_case {
  csr_graph g;
  csr_view v;
  std::vector<uint32_t> sources;
};

graph_case make_case(unsigned scale) {
  graph_case c{generate(kron(scale, true)), {}, {}};
  c.v = view_of(c.g);
  // The highest-degree node and two others that have edges.
  c.sources = {uint32_t(max_degree_node(c.g.offsets.data(), c.g.nodes))};
  for (uint32_t x = 1; x < c.g.nodes && c.sources.size() < 3; x += 97)
    if (c.g.offsets[x + 1] > c.g.offsets[x]) c.sources.push_back(x);
  return c;
}

// A host page cache of `pages` 4 KiB pages with two small queues: far
// smaller than the test graphs, so the algorithms run under eviction.
cache_config small_cache(uint64_t pages, cache_config::file_tier tier = cache_config::file_tier::never) {
  cache_config k;
  k.page_size = 4096;
  k.capacity_bytes = pages * 4096;
  k.queue_pairs = 2;
  k.queue_entries = 64;
  k.direct_files = tier;
  return k;
}

// `chunked`: lists cut into chunks of a few entries, where each chunk past a
// list's lower half still looks at its first entry.
template <class G>
void check_all(cpu_exec& x, const G& gv, const graph_case& c, bool chunked = false) {
  for (const uint32_t s : c.sources) {
    const std::vector<uint32_t> want = bfs_reference(c.v, s);
    for (const bool dir : {false, true}) {
      bfs_options o;
      o.source = s;
      o.direction_optimizing = dir;
      const bfs_result r = bfs(x, gv, o);
      ASSERT_EQ(r.depth, want) << "BFS from " << s << (dir ? " (direction-optimizing)" : " (top-down)");
      EXPECT_EQ(r.reached, uint64_t(std::count_if(want.begin(), want.end(), [](uint32_t d) { return d != unreached; })));
      EXPECT_EQ(r.stats.bad_ids, 0u);
    }
    const sssp_result d = sssp(x, gv, s);
    const std::vector<uint64_t> dwant = sssp_reference(c.v, s);
    ASSERT_EQ(d.dist.size(), dwant.size());
    for (size_t i = 0; i < dwant.size(); ++i) ASSERT_EQ(d.dist[i], dwant[i]) << "SSSP from " << s << ", node " << i;
  }
  const cc_result cc = connected_components(x, gv, c.g.flags);
  ASSERT_EQ(cc.label, cc_reference(c.v));
  // Lower-half reads look at about half the edges.
  EXPECT_LT(cc.stats.edges_looked, c.g.edges() * (chunked ? 75 : 60) / 100);
  const cc_result full = connected_components(x, gv, 0u);
  ASSERT_EQ(full.label, cc.label);
  EXPECT_EQ(full.stats.edges_looked, c.g.edges());

  pagerank_options po;
  po.iterations = 15;
  const pagerank_result pr = pagerank(x, gv, po);
  const std::vector<double> pwant = pagerank_reference(c.v, 15);
  double l1 = 0;
  for (size_t i = 0; i < pwant.size(); ++i) l1 += std::fabs(double(pr.rank[i]) - pwant[i]);
  EXPECT_LT(l1, 1e-4) << "PageRank L1 distance from the double-precision reference";
  EXPECT_EQ(pr.stats.edges_looked, uint64_t(po.iterations) * c.g.edges());
}

}  // namespace

TEST(GraphAlgorithms, CpuThreadsOverMemoryMatchTheReferences) {
  const graph_case c = make_case(11);
  memory_graph m{c.g.nodes, c.g.offsets.data(), c.g.nbr32.data(), c.g.wts.data()};
  cpu_exec x(4);
  check_all(x, m, c);
}

TEST(GraphAlgorithms, CpuClientsThroughASmallPageCacheMatchTheReferences) {
  const bool tsan = test::scale_div > 1;
  const graph_case c = make_case(tsan ? 11 : 14);
  scratch_file f("cached.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  const cache_config k = small_cache(tsan ? 16 : 24);  // through the controller
  auto cache = make_host_page_cache(ctl, k);
  graph_arrays arrays(cache, file);
  ASSERT_GT(file.neighbours_bytes(), (tsan ? 1 : 8) * k.capacity_bytes);
  cpu_exec x(3);
  check_all(x, arrays.view(), c);  // offsets through the cache too
  const cache_stats s = cache->stats();
  EXPECT_GT(s.misses, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_TRUE(cache->last_error().ok()) << describe(cache->last_error());
  // The checked runs over the arrays (checked_runs.hpp) give the same answers.
  {
    bfs_options o;
    o.source = c.sources[0];
    EXPECT_EQ(bfs(x, arrays, o).depth, bfs_reference(c.v, o.source));
    EXPECT_EQ(connected_components(x, arrays, c.g.flags).label, cc_reference(c.v));
  }
  // Offsets from memory, edges through the cache.
  bfs_options o;
  o.source = c.sources[0];
  EXPECT_EQ(bfs(x, arrays.view(c.g.offsets.data()), o).depth, bfs_reference(c.v, o.source));
}

// Long lists cut into chunks every thread shares (steps.hpp: long lists):
// with a threshold of 16 entries most lists of these graphs are queued and
// walked 4 entries a chunk, and with a queue of 3 most are refused and
// walked whole; every algorithm still gives the references' answers, and
// PageRank, which looks at every edge once an iteration, looks at each
// exactly once (no chunk lost or walked twice).
TEST(GraphAlgorithms, LongListsSharedInChunksMatchTheReferences) {
  const bool tsan = test::scale_div > 1;
  const graph_case c = make_case(tsan ? 10 : 12);
  memory_graph m{c.g.nodes, c.g.offsets.data(), c.g.nbr32.data(), c.g.wts.data()};
  ASSERT_GT(c.g.offsets[c.sources[0] + 1] - c.g.offsets[c.sources[0]], 64u);  // the hub's list is long
  for (const uint32_t capacity : {1u << 16, 3u}) {
    SCOPED_TRACE("queue capacity " + std::to_string(capacity));
    cpu_exec x(4);
    x.set_long_lists(16, 4, capacity);
    check_all(x, m, c, true);
  }
  // Through a small page cache (chunks start and end inside pages).
  scratch_file f("chunks.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  auto cache = make_host_page_cache(ctl, small_cache(16));
  graph_arrays arrays(cache, file);
  cpu_exec x(3);
  x.set_long_lists(16, 5);
  check_all(x, arrays.view(c.g.offsets.data()), c, true);
  EXPECT_TRUE(cache->last_error().ok()) << describe(cache->last_error());
  EXPECT_THROW(x.set_long_lists(16, 17), error);
}

// CC reads each list's lower half, a prefix: a chunk of a long list that
// starts past it looks at its first entry in place (the direct tier's
// mapping) and stops, so cutting lists into chunks fetches no page that
// walking them whole did not (a cache holding every page, so the misses
// are the pages touched).
TEST(GraphAlgorithms, ChunksPastALowerHalfFetchNoPage) {
  const graph_case c = make_case(12);
  scratch_file f("halves.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller ctl;
  cache_config k;
  k.page_size = 512;  // 128 entries: the hub's upper half fills pages of its own
  ASSERT_GT(c.g.offsets[c.sources[0] + 1] - c.g.offsets[c.sources[0]], 4 * 128u);
  k.capacity_bytes = (file.neighbours_bytes() / 512 + 64) * 512;
  k.queue_pairs = 2;
  k.queue_entries = 64;
  k.direct_files = cache_config::file_tier::always;
  auto cache = make_host_page_cache(ctl, k);
  graph_dataset_options dopt;
  dopt.block_size = 512;
  // Checked as read: a 512-byte page reads and checks its whole 4 KiB block.
  graph_arrays arrays(cache, file, dopt);
  const cached_graph g = arrays.view(c.g.offsets.data(), true);
  ASSERT_NE(g.nbr_stream, nullptr);
  std::vector<uint64_t> misses;
  for (const uint64_t threshold : {uint64_t(0), uint64_t(16)}) {
    ASSERT_TRUE(cache->clear().ok());
    cache->reset_stats();
    cpu_exec x(3);
    x.set_long_lists(threshold, 4);
    ASSERT_EQ(connected_components(x, g, c.g.flags).label, cc_reference(c.v)) << "threshold " << threshold;
    misses.push_back(cache->stats().misses);
    EXPECT_EQ(cache->stats().evictions, 0u);
  }
  EXPECT_GT(misses[0], 0u);
  EXPECT_EQ(misses[1], misses[0]) << "pages fetched with lists in chunks, against whole";
}

// Direction-optimizing BFS weighs edges (Beamer's rule): from a Kronecker
// graph's hub the first level is top-down (one list) and the second
// bottom-up (the hub's neighbours own most of the edges), which looks at far
// fewer edges than walking all their lists; the depths are the same.
TEST(GraphAlgorithms, BfsGoesBottomUpWhenTheFrontierOwnsMostEdges) {
  const graph_case c = make_case(14);
  memory_graph m{c.g.nodes, c.g.offsets.data(), c.g.nbr32.data(), c.g.wts.data()};
  cpu_exec x(4);
  bfs_options o;
  o.source = c.sources[0];
  const bfs_result dir = bfs(x, m, o);
  o.direction_optimizing = false;
  const bfs_result td = bfs(x, m, o);
  ASSERT_EQ(dir.depth, td.depth);
  ASSERT_GE(dir.levels.size(), 3u);
  EXPECT_FALSE(dir.levels[0].bottom_up);
  EXPECT_TRUE(dir.levels[1].bottom_up);
  EXPECT_FALSE(dir.levels.back().bottom_up);  // the last, small frontiers go top-down again
  EXPECT_LT(dir.stats.edges_looked * 4, td.stats.edges_looked);
  // The old rule: bottom-up exactly while the frontier holds more than the
  // fraction of the nodes.
  o.direction_optimizing = true;
  for (const double fraction : {0.05, 0.2}) {
    o.bottom_up_fraction = fraction;
    const bfs_result by_nodes = bfs(x, m, o);
    EXPECT_EQ(by_nodes.depth, td.depth);
    for (const bfs_level& l : by_nodes.levels)
      EXPECT_EQ(l.bottom_up, double(l.frontier) > fraction * double(c.g.nodes)) << "frontier " << l.frontier;
  }
  o.bottom_up_fraction = 2;
  EXPECT_THROW(bfs(x, m, o), error);
  o.bottom_up_fraction = 0;
  o.alpha = 0;
  EXPECT_THROW(bfs(x, m, o), error);
}

// The lists' pin-free reads (cached_graph::pin_free_strides) under constant
// eviction: every page run read with no pin, and none, give the references'
// answers, and the counters show which path read them.
TEST(GraphAlgorithms, ListsReadWithNoPinUnderEvictionMatchTheReferences) {
  const bool tsan = test::scale_div > 1;
  const graph_case c = make_case(tsan ? 11 : 13);
  scratch_file f("pinfree.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  const cache_config k = small_cache(tsan ? 8 : 16);
  auto cache = make_host_page_cache(ctl, k);
  graph_arrays arrays(cache, file);
  ASSERT_GT(file.neighbours_bytes(), 3 * k.capacity_bytes);
  cpu_exec x(4);
  for (const uint32_t strides : {0u, 1u << 20}) {
    cached_graph g = arrays.view(c.g.offsets.data());  // offsets in memory: only the lists use the cache
    g.pin_free_strides = strides;
    cache->reset_stats();
    for (const uint32_t s : c.sources) {
      bfs_options o;
      o.source = s;
      ASSERT_EQ(bfs(x, g, o).depth, bfs_reference(c.v, s)) << "pin_free_strides " << strides;
    }
    ASSERT_EQ(connected_components(x, g, c.g.flags).label, cc_reference(c.v)) << "pin_free_strides " << strides;
    const cache_stats st = cache->stats();
    EXPECT_GT(st.evictions, 0u);
    if (strides)
      EXPECT_GT(st.hit_reads, 0u);
    else
      EXPECT_EQ(st.hit_reads, 0u);
    // Weighted lists always pin (two arrays per page run).
    const std::vector<uint64_t> want = sssp_reference(c.v, c.sources[0]);
    const sssp_result d = sssp(x, g, c.sources[0]);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(d.dist[i], want[i]);
  }
  EXPECT_TRUE(cache->last_error().ok()) << describe(cache->last_error());
}

// Warps of several lanes (emulated, one thread a lane) walk every list
// through a small cache, with and without pins: each entry seen once. Five
// lanes do not divide a page's 1,024 entries, so a run's last stride
// overshoots the page's end (a list going on in the next page must resume
// there); two warps at once keep evicting each other's pages.
TEST(GraphAlgorithms, WarpsWalkEveryListEntryOnceWithAndWithoutPins) {
  const graph_case c = make_case(11);
  scratch_file f("walk.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller ctl;
  const cache_config k = small_cache(8, cache_config{}.direct_files);
  auto cache = make_host_page_cache(ctl, k);
  graph_arrays arrays(cache, file);
  uint64_t crossing = 0;  // lists that go on in the next page
  for (uint64_t v = 0; v < c.g.nodes; ++v)
    crossing += c.g.offsets[v + 1] > c.g.offsets[v] && c.g.offsets[v] / 1024 != (c.g.offsets[v + 1] - 1) / 1024;
  ASSERT_GT(crossing, 10u);
  for (const uint32_t strides : {0u, 4u, 1u << 20}) {
    cached_graph g = arrays.view(c.g.offsets.data());
    g.pin_free_strides = strides;
    std::vector<std::atomic<uint64_t>> sum(c.g.nodes), count(c.g.nodes);
    std::vector<std::thread> warps;
    for (uint32_t wid = 0; wid < 2; ++wid)
      warps.emplace_back([&, wid] {
        test::run_warp(0x1Fu, wid, [&](test::emulated_warp w) {
          for (uint64_t v = wid; v < c.g.nodes; v += 2) {
            uint64_t s = 0, n = 0;
            const uint64_t b = c.g.offsets[v], e = c.g.offsets[v + 1];
            const uint64_t looked = g.for_each_edge<false>(w, b, e, [&](uint32_t u, uint32_t) {
              s += u + 1;
              ++n;
              return false;
            });
            if (looked != e - b) count[v] += 1ull << 40;  // a walk cut short
            sum[v] += s;
            count[v] += n;
          }
        });
      });
    for (auto& t : warps) t.join();
    uint64_t wrong = 0;
    for (uint64_t v = 0; v < c.g.nodes; ++v) {
      uint64_t s = 0;
      for (uint64_t i = c.g.offsets[v]; i < c.g.offsets[v + 1]; ++i) s += c.g.nbr32[i] + 1;
      wrong += sum[v] != s || count[v] != c.g.offsets[v + 1] - c.g.offsets[v];
    }
    EXPECT_EQ(wrong, 0u) << "lists read wrong with pin_free_strides " << strides;
  }
  EXPECT_GT(cache->stats().evictions, 0u);
  EXPECT_TRUE(cache->last_error().ok()) << describe(cache->last_error());
}

TEST(GraphAlgorithms, BottomUpReadsInPlaceFromTheDirectTier) {
  const graph_case c = make_case(12);
  scratch_file f("direct.dwg");
  write_csr(f.path(), c.g);
  csr_file file(f.path());
  controller ctl;
  cache_config k;
  k.capacity_bytes = 32 * 4096;
  k.queue_pairs = 2;
  k.queue_entries = 64;
  k.direct_files = cache_config::file_tier::always;  // the lists readable in place
  auto cache = make_host_page_cache(ctl, k);
  graph_arrays arrays(cache, file);
  ASSERT_TRUE(arrays.edges_direct());
  const cached_graph streaming = arrays.view(nullptr, true);
  ASSERT_NE(streaming.nbr_stream, nullptr);
  EXPECT_EQ(arrays.view().nbr_stream, nullptr);
  cpu_exec x(3);
  for (const uint32_t s : c.sources) {
    bfs_options o;
    o.source = s;
    const bfs_result r = bfs(x, streaming, o);
    EXPECT_EQ(r.depth, bfs_reference(c.v, s));
    EXPECT_GT(r.bottom_up_levels, 0u);
    EXPECT_GT(r.bottom_up_edges, 0u);
  }
  const sssp_result d = sssp(x, streaming, c.sources[0]);  // weighted reads stay on the page path
  const std::vector<uint64_t> want = sssp_reference(c.v, c.sources[0]);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(d.dist[i], want[i]);
}

TEST(GraphAlgorithms, BadSourceAndCorruptIdsAreReported) {
  const graph_case c = make_case(8);
  memory_graph m{c.g.nodes, c.g.offsets.data(), c.g.nbr32.data(), c.g.wts.data()};
  cpu_exec x(2);
  bfs_options o;
  o.source = uint32_t(c.g.nodes);
  expect_error([&] { bfs(x, m, o); }, "out of range");
  expect_error([&] { sssp(x, m, uint32_t(c.g.nodes + 5)); }, "out of range");
  std::vector<uint32_t> corrupt = c.g.nbr32;
  corrupt[3] = uint32_t(c.g.nodes + 10);
  memory_graph bad{c.g.nodes, c.g.offsets.data(), corrupt.data(), c.g.wts.data()};
  EXPECT_GT(connected_components(x, bad, 0u).stats.bad_ids, 0u);
}

// A library user's graph_arrays over a file whose offsets run past its
// edges: the constructor names the file and the node; unchecked (as the
// command line makes them, having checked before), the cache refuses the
// reads past the neighbour array and records the error instead of
// serving bytes from beyond it.
TEST(GraphAlgorithms, CorruptOffsetsAreRefusedByGraphArrays) {
  const graph_case c = make_case(10);
  scratch_file f("corrupt-offsets.dwg");
  write_csr(f.path(), c.g);
  const csr_header h = csr_file(f.path()).header();
  const int fd = ::open(f.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t far = h.edges + 100000;
  ASSERT_EQ(::pwrite(fd, &far, 8, off_t(h.offsets_at + 8 * 3)), 8);
  ::close(fd);
  csr_file file(f.path());
  controller ctl;
  auto cache = make_host_page_cache(ctl, small_cache(16));
  expect_error([&] { graph_arrays a(cache, file); }, "offsets of node 2 run from");
  graph_dataset_options unchecked;
  unchecked.check_offsets = false;
  // Nor the blocks' sums, which would fail the offsets' block first (the
  // file test_file_integrity.cpp tests that): here the list itself runs
  // past the neighbours, as in a version-1 file.
  unchecked.checked = false;
  graph_arrays arrays(cache, file, unchecked);
  cpu_exec x(2);
  bfs_options o;
  o.source = 2;  // node 2's list runs from its offset to past the edges
  bfs(x, arrays.view(), o);  // the plain driver returns; the cache has the error
  EXPECT_EQ(cache->last_error().code, client_code::out_of_range) << describe(cache->last_error());
  // Over the arrays themselves (checked_runs.hpp) the run throws instead.
  expect_error([&] { bfs(x, arrays, o); }, "bfs: the page cache could not serve a read of the graph");
  // A pending error is reported too (the answer could be the one it spoiled).
  expect_error([&] { connected_components(x, arrays, 0u); }, "connected components: the page cache could not serve");
  // The file's own readers (deepwell graph info's statistics, a copy in
  // memory) check what they read: the offsets' block fails its sum.
  expect_error([&] { (void)file.stats(2); }, "offsets section");
  expect_error([&] { (void)file.load(); }, "offsets section");
}
