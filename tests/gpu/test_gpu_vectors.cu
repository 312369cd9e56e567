// Vector search by GPU warps through a GPU page cache far smaller than the
// index: the same ids and distances, bit for bit, as CPU clients on the
// same index, the recall that implies, and a damaged record named.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "../common/vectors_case.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/vectors/gpu_build.hpp"
#include "deepwell/vectors/gpu_search.hpp"
#include "deepwell/vectors/index.hpp"
#include "vectors/graph_engine.hpp"

using namespace deepwell;
using namespace deepwell::vectors;
using deepwell::test::scratch_file;
using deepwell::test::vectors_case;

namespace {

cache_config gpu_cache_of(uint64_t pages) {
  cache_config k;
  k.page_size = 4096;
  k.capacity_bytes = pages * 4096;
  k.direct_files = cache_config::file_tier::never;  // every record through the controller
  return k;
}

struct answers {
  std::vector<uint32_t> ids;
  std::vector<float> d;
  search_counts counts;
};

answers on_cpu(const vectors_case& c, const search_options& o) {
  cache_config k = gpu_cache_of(256);
  k.queue_pairs = 2;
  k.queue_entries = 64;
  vector_index index(make_host_page_cache(embedded_link(), k), c.index.path());
  answers a;
  a.ids.resize(c.nq * o.k);
  a.d.resize(c.nq * o.k);
  a.counts = index.search(c.queries.data(), c.nq, o, a.ids.data(), a.d.data(), 4);
  return a;
}

answers on_gpu(const vectors_case& c, const search_options& o, uint64_t pages, const std::string& path = "") {
  vector_index index(make_gpu_page_cache(embedded_link(), gpu_cache_of(pages)), path.empty() ? c.index.path() : path);
  gpu_search g(index);
  answers a;
  a.ids.resize(c.nq * o.k);
  a.d.resize(c.nq * o.k);
  a.counts = g.search(c.queries.data(), c.nq, o, a.ids.data(), a.d.data());
  // A second run over the same scratch: the same again.
  std::vector<uint32_t> ids(a.ids.size());
  std::vector<float> d(a.d.size());
  g.search(c.queries.data(), c.nq, o, ids.data(), d.data());
  EXPECT_EQ(ids, a.ids);
  return a;
}

}  // namespace

TEST(GpuVectorSearch, TheSameAnswersAsCpuClientsBitForBit) {
  struct shape {
    vector_type t;
    metric m;
    uint32_t dim;
    uint32_t width;
  };
  for (const shape sh : {shape{vector_type::f32, metric::l2, 96, 4}, shape{vector_type::u8, metric::l2, 128, 8},
                         shape{vector_type::f16, metric::inner_product, 40, 2}}) {
    SCOPED_TRACE(std::string(type_name(sh.t)) + " " + metric_name(sh.m));
    build_options bo;
    bo.degree = 32;
    const vectors_case c(20000, sh.dim, sh.t, sh.m, 1000, bo);
    const index_header h = index_file(c.index.path()).header();
    const uint64_t pages = std::max<uint64_t>(256, h.records_bytes / 4096 / 4);  // a quarter of the records
    ASSERT_GE(h.records_bytes, 4 * pages * 4096);
    // whole pages (nearer mates), whole pages (all mates), picked records; nearer mates from entry samples of 37
    // (fewer than a warp's lanes twice over, not a multiple of 32) and 1,000
    for (const int use : {0, 1, 2, 3, 4})
      for (const uint32_t list : {16u, 64u, 150u}) {
        const char* how = use == 0 ? "nearer mates" : use == 1 ? "all mates" : use == 2 ? "picked"
                        : use == 3 ? "entry sample 37" : "entry sample 1000";
        SCOPED_TRACE(std::string(how) + ", list " + std::to_string(list));
        search_options o;
        o.k = 10;
        o.list = list;
        o.width = sh.width;
        o.whole_pages = use != 2;
        o.all_mates = use == 1;
        o.entry_sample = use == 3 ? 37 : use == 4 ? 1000 : 0;
        const answers cpu = on_cpu(c, o), gpu = on_gpu(c, o, pages);
        EXPECT_EQ(cpu.ids, gpu.ids);
        EXPECT_EQ(0, std::memcmp(cpu.d.data(), gpu.d.data(), cpu.d.size() * 4));
        EXPECT_EQ(cpu.counts.expansions, gpu.counts.expansions);
        EXPECT_EQ(cpu.counts.distances, gpu.counts.distances);
        EXPECT_EQ(cpu.counts.fetches, gpu.counts.fetches);
        EXPECT_EQ(cpu.counts.page_mates, gpu.counts.page_mates);
        EXPECT_EQ(gpu.counts.bad_ids, 0u);
        const double recall = recall_at(10, gpu.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
        std::printf("  %s %s list %u: recall@10 %.4f, %.1f fetches a query, %.1f nodes expanded\n", type_name(sh.t), how, list, recall, double(gpu.counts.fetches) / double(c.nq),
                    double(gpu.counts.expansions) / double(c.nq));
        if (list >= 64) EXPECT_GE(recall, 0.9);
      }
  }
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
}

// The GPU build writes the CPU build's file, byte for byte: the same
// quantiser, first graph, passes and reverse edges, every distance in one
// order. Shapes with a tail past 32 dimensions, a 16-dimension row (one
// partial a lane) and the inner product's extra coordinate.
TEST(GpuVectorBuild, WritesTheCpuBuildsFileByteForByte) {
  struct shape {
    vector_type t;
    metric m;
    uint32_t dim, degree, list;
    uint64_t count;
  };
  for (const shape sh : {shape{vector_type::f32, metric::l2, 96, 32, 64, 20000},
                         shape{vector_type::u8, metric::l2, 128, 24, 48, 30000},
                         shape{vector_type::f16, metric::inner_product, 40, 32, 64, 12000},
                         shape{vector_type::f32, metric::l2, 16, 16, 40, 5000}}) {
    SCOPED_TRACE(std::string(type_name(sh.t)) + " " + metric_name(sh.m) + " dim " + std::to_string(sh.dim));
    build_options bo;
    bo.degree = sh.degree;
    bo.list = sh.list;
    bo.resume = false;
    const vectors_case c(sh.count, sh.dim, sh.t, sh.m, 200, bo);
    scratch_file on_gpu("gpu.dwv");
    const auto t = std::chrono::steady_clock::now();
    const build_report r = build_index_on_gpu(c.base, sh.m, on_gpu.path(), bo);
    std::printf("  %s dim %u: %llu vectors, CPU build %.2f s, GPU build %.2f s\n", type_name(sh.t), sh.dim,
                (unsigned long long)sh.count, c.report.quantiser_seconds + c.report.graph_seconds,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    EXPECT_EQ(r.edges, c.report.edges);
    const std::vector<char> a = bytes_of(c.index.path()), b = bytes_of(on_gpu.path());
    ASSERT_EQ(a.size(), b.size());
    size_t first = 0;
    while (first < a.size() && a[first] == b[first]) ++first;
    EXPECT_EQ(first, a.size()) << "the files differ first at byte " << first;
  }
}

// A node whose search outgrows the GPU pass's room is redone on the CPU:
// with room for 8 expanded nodes nearly every node is, and the file is
// still the CPU build's.
TEST(GpuVectorBuild, NodesRedoneOnTheCpuGiveTheSameFile) {
  build_options bo;
  bo.degree = 16;
  bo.list = 32;
  bo.resume = false;
  const vectors_case c(4000, 24, vector_type::f32, metric::l2, 10, bo);
  scratch_file on_gpu("gpu-redo.dwv");
  build_index_with(c.base, metric::l2, on_gpu.path(), bo, [](float_rows rows, graph_shape shape) {
    shape.gpu_search_room = 8;
    return make_gpu_graph_engine(rows, shape);
  });
  EXPECT_EQ(bytes_of(c.index.path()), bytes_of(on_gpu.path()));
}

// Out of core: a sharded GPU build (each shard's graph on the GPU, merged
// on the host) writes the sharded CPU build's file, byte for byte; and the
// GPU's own shard size (its free memory over a vector's share) holds this
// small set at once and millions of vectors on a GPU of tens of GiB.
TEST(GpuVectorBuild, AShardedBuildWritesTheCpuBuildsFile) {
  build_options bo;
  bo.degree = 24;
  bo.list = 48;
  bo.resume = false;
  bo.shard_vectors = 8000;
  const vectors_case c(30000, 64, vector_type::u8, metric::l2, 10, bo);
  EXPECT_GE(c.report.shards, 7u);
  scratch_file on_gpu("gpu-sharded.dwv");
  const auto t = std::chrono::steady_clock::now();
  const build_report r = build_index_on_gpu(c.base, metric::l2, on_gpu.path(), bo);
  std::printf("  30000 x 64 uint8 in %u shards: CPU build %.2f s, GPU build %.2f s\n", r.shards,
              c.report.quantiser_seconds + c.report.graph_seconds,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  EXPECT_EQ(r.shards, c.report.shards);
  EXPECT_EQ(bytes_of(c.index.path()), bytes_of(on_gpu.path()));
  const uint64_t fits = gpu_build_capacity(129, 32);
  std::printf("  the GPU build holds %llu vectors of 128 dimensions at once\n", (unsigned long long)fits);
  EXPECT_GT(fits, 1000000u);
  bo.shard_vectors = 0;
  scratch_file whole("gpu-whole.dwv");
  EXPECT_EQ(build_index_on_gpu(c.base, metric::l2, whole.path(), bo).shards, 0u);
}

TEST(GpuVectorSearch, ADamagedRecordIsNamed) {
  const vectors_case c(3000, 32, vector_type::f32, metric::l2, 50);
  const index_header h = index_file(c.index.path()).header();
  std::ifstream in(c.index.path(), std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), {});
  all[h.records_at + record_offset(h, h.entry) + 4] ^= 0x21;
  scratch_file bad("bad.dwv");
  std::ofstream(bad.path(), std::ios::binary).write(all.data(), std::streamsize(all.size()));
  search_options from_the_entry;
  from_the_entry.entry_sample = 0;  // each query's first fetch is the entry's page
  try {
    on_gpu(c, from_the_entry, 512, bad.path());
    ADD_FAILURE() << "a damaged record was searched";
  } catch (const data_error& e) {
    const uint32_t row = index_file(c.index.path()).read_labels()[h.entry];
    EXPECT_NE(std::string(e.what()).find("node " + std::to_string(row)), std::string::npos) << e.what();
  }
}
