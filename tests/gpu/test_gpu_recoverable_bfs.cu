// The recoverable BFS on the GPU (the steps of
// apps/recoverable_bfs/recoverable_bfs.hpp run as kernels by gpu_exec):
// the state through a GPU page cache on a disk with a volatile write cache
// (crash_target.hpp), cut at random requests in each power-cut mode,
// revived and resumed by a new controller and cache; and, with no cut,
// per-level persists giving the plain GPU BFS's depths.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "../common/scratch_file.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/gpu_exec.cuh"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "recoverable_bfs/recoverable_bfs.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/graph/reference.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

struct graph_fixture {
  test::scratch_file file{"rbfs-gpu.dwg"};
  csr_graph g;
  csr_view v;
  graph_identity id;
  uint32_t source = 0;
  std::vector<uint32_t> want;
  explicit graph_fixture(unsigned scale) {
    generator_options o;
    o.scale = scale;
    o.degree = 16;
    o.seed = 3;
    g = generate(o);
    v = view_of(g);
    id = identity_of(g);
    source = uint32_t(max_degree_node(g.offsets.data(), g.nodes));
    want = bfs_reference(v, source);
    write_csr(file.path(), g);
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

struct config {
  uint64_t log_words = 0;
  bool store_depths = true;
  cache_config::file_tier tier = cache_config::file_tier::never;
};

// One process: a controller, a GPU cache of the least a 16-block launch may
// have (16 MiB: far smaller than the edges), the graph from its file and
// the state on `disk`, through that cache.
struct process {
  gpu_exec& x;
  controller ctl;
  std::shared_ptr<page_cache> cache;
  csr_file file;
  std::unique_ptr<graph_arrays> arrays;
  std::unique_ptr<bfs_state> state;
  process(gpu_exec& ex, const graph_fixture& f, std::shared_ptr<target> disk, const config& c)
      : x(ex), file(f.file.path()) {
    cache_config k;
    k.page_size = 4096;
    k.capacity_bytes = uint64_t(x.warps()) * 32 * 4096;
    k.direct_files = c.tier;
    k.timeout_ns = 20ull * 1000000000ull;
    cache = make_gpu_page_cache(ctl, k);
    cache->check_capacity(x.warps());
    arrays = std::make_unique<graph_arrays>(cache, file);
    state = std::make_unique<bfs_state>(cache, ctl.add_namespace({std::move(disk), 512, false}), "gpu-crash-disk.rbfs");
  }
  recoverable_bfs_result run(const graph_fixture& f, const config& c, const uint64_t* offsets,
                             recoverable_bfs_options::start_t start = recoverable_bfs_options::start_t::resume_or_create) {
    recoverable_bfs_options o;
    o.source = f.source;
    o.graph = f.id;
    o.start = start;
    o.store_depths = c.store_depths;
    o.log_words = c.log_words;
    return recoverable_bfs(x, arrays->view(offsets), *state, o);
  }
};

uint64_t differences(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  uint64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

}  // namespace

// No cut: the recoverable BFS (state through the cache, every level
// persisted) gives the plain GPU BFS's depths over the same graph and
// cache, and the reference's; the durable state holds them too.
TEST(GpuRecoverableBfs, PerLevelPersistsGiveThePlainGpuBfsDepths) {
  const graph_fixture f(17);
  gpu_exec x(16);
  device_copy<uint64_t> off(f.g.offsets);
  for (const auto tier : {cache_config::file_tier::never, cache_config::file_tier::resident}) {
    for (const uint64_t log : {uint64_t(0), uint64_t(3000)}) {
      SCOPED_TRACE(std::string(tier == cache_config::file_tier::never ? "controller" : "mapping") +
                   (log ? ", small log" : ""));
      config c;
      c.tier = tier;
      c.log_words = log;
      auto disk = make_volatile_cache_target(bfs_state_bytes(f.g.nodes, log));
      process p(x, f, disk, c);
      bfs_options bo;
      bo.source = f.source;
      const bfs_result plain = bfs(x, p.arrays->view(off.p), bo);
      EXPECT_EQ(differences(plain.depth, f.want), 0u);
      const recoverable_bfs_result r = p.run(f, c, off.p);
      EXPECT_TRUE(r.finished);
      EXPECT_EQ(differences(r.depth, plain.depth), 0u);
      EXPECT_EQ(r.reached, plain.reached);
      EXPECT_GT(r.bottom_up_levels, 0u);
      if (log) EXPECT_GT(r.checkpoints, 1u);
      // Offsets through the cache too.
      const recoverable_bfs_result r2 = p.run(f, c, nullptr, recoverable_bfs_options::start_t::create);
      EXPECT_EQ(differences(r2.depth, f.want), 0u);
      EXPECT_TRUE(p.cache->last_error().ok()) << describe(p.cache->last_error());
      const std::vector<uint8_t> img = disk->durable_image();
      const bfs_state_summary s = inspect_bfs_state(img.data(), img.size());
      ASSERT_TRUE(s.valid) << s.problem;
      EXPECT_TRUE(s.header.flags & rbfs_depths_complete);
      uint64_t wrong = 0;
      for (uint64_t v = 0; v < f.g.nodes; ++v) {
        uint32_t d;
        std::memcpy(&d, img.data() + (s.header.depth_at + v) * 4, 4);
        wrong += d != f.want[v];
      }
      EXPECT_EQ(wrong, 0u) << "depths in the durable state";
      // A resume of the finished state does nothing.
      const uint64_t requests = disk->requests();
      const recoverable_bfs_result again = p.run(f, c, off.p, recoverable_bfs_options::start_t::resume);
      EXPECT_EQ(again.levels_run, 0u);
      EXPECT_EQ(disk->requests(), requests);
      EXPECT_EQ(differences(again.depth, f.want), 0u);
    }
  }
}

// Power cuts at random requests, each mode, some during a checkpoint-heavy
// run (a small log) and some during the resume too: every final resume
// gives the reference depths.
TEST(GpuRecoverableBfs, SurvivesPowerCuts) {
  const graph_fixture f(15);
  gpu_exec x(16);
  device_copy<uint64_t> off(f.g.offsets);
  std::mt19937_64 rng(2026);
  unsigned total = 0, fired = 0, resumed = 0;
  uint64_t wrong = 0;
  for (const uint64_t log : {uint64_t(0), uint64_t(1200)}) {
    config c;
    c.log_words = log;
    uint64_t requests = 0;
    {
      auto disk = make_volatile_cache_target(bfs_state_bytes(f.g.nodes, log));
      process p(x, f, disk, c);
      const recoverable_bfs_result r = p.run(f, c, off.p);
      ASSERT_EQ(differences(r.depth, f.want), 0u);
      requests = disk->requests();
    }
    for (const power_cut::mode_t mode : {power_cut::drop_all, power_cut::keep_random, power_cut::torn}) {
      for (unsigned t = 0; t < 10; ++t, ++total) {
        SCOPED_TRACE("log " + std::to_string(log) + ", mode " + std::to_string(mode) + ", trial " + std::to_string(t));
        auto disk = make_volatile_cache_target(bfs_state_bytes(f.g.nodes, log), mode == power_cut::torn ? 128 : 512);
        power_cut how;
        how.mode = mode;
        how.seed = rng();
        how.keep_fraction = double(rng() % 1001) / 1000.0;
        const uint64_t at = 1 + rng() % requests;
        disk->cut_at_request(at, how);
        {
          process p(x, f, disk, c);
          try {
            p.run(f, c, off.p);
          } catch (const deepwell::error&) {
          }
        }
        fired += disk->dead();
        if (!disk->dead()) disk->cut(how);
        disk->revive();
        if (t % 3 == 0) {  // the resume is cut too
          how.seed = rng();
          disk->cut_at_request(1 + rng() % (requests / 2 + 1), how);
          {
            process p(x, f, disk, c);
            try {
              p.run(f, c, off.p);
            } catch (const deepwell::error&) {
            }
          }
          if (!disk->dead()) disk->cut(how);
          disk->revive();
        }
        process p(x, f, disk, c);
        try {
          const recoverable_bfs_result r = p.run(f, c, t % 2 ? nullptr : off.p);
          EXPECT_TRUE(r.finished);
          resumed += r.resumed;
          const uint64_t d = differences(r.depth, f.want);
          if (d) ADD_FAILURE() << d << " depths differ after a cut at request " << at;
          wrong += d != 0;
        } catch (const deepwell::error& e) {
          ADD_FAILURE() << "resume after a cut at request " << at << ": " << e.what();
          ++wrong;
        }
      }
    }
  }
  EXPECT_GE(total, 50u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(fired, total * 8 / 10);
  EXPECT_GT(resumed, total / 2);
  std::printf("%u cuts, %u during the run, %u resumes of real progress\n", total, fired, resumed);
}

// Bad states are refused on the GPU path too (the header is read by a kernel).
TEST(GpuRecoverableBfs, BadStatesAreRejected) {
  const graph_fixture f(14);
  gpu_exec x(16);
  device_copy<uint64_t> off(f.g.offsets);
  const config c;
  auto disk = make_volatile_cache_target(bfs_state_bytes(f.g.nodes));
  {
    process p(x, f, disk, c);
    p.run(f, c, off.p);
  }
  std::vector<uint8_t> img = disk->durable_image();
  img[100] ^= 1;
  img[4096 + 100] ^= 1;
  process p(x, f, make_volatile_cache_target(img), c);
  try {
    p.run(f, c, off.p);
    ADD_FAILURE() << "no error";
  } catch (const deepwell::error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu-crash-disk.rbfs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
}
