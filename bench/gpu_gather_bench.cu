// Gathers of random rows into GPU memory: deepwell against what a user would
// pick instead, in the same run, on the same data.
//
//   dependent  `hops` batches of `batch` rows, each batch's row ids computed
//              on the GPU from the previous batch's data (multi-hop gathers,
//              neighbour sampling, pointer chasing). deepwell runs all hops
//              in one kernel, one warp per chain; the tiling baseline runs a
//              batch at a time: CPU threads read the rows, copy them to the
//              GPU, a kernel computes the next ids, the ids come back.
//   bulk       one large batch of independent random rows.
//
// Methods: deepwell (array_ref::read_range through the page cache; direct
// tier and through the controller), tiling (tiling_gatherer.hpp: CPU
// threads, pread or memcpy into pinned buffers, double-buffered
// cudaMemcpyAsync), zero-copy (warps read the rows straight from pinned host
// memory: EMOGI), and unified memory (only when the data fits in GPU memory:
// oversubscribed managed memory can hang the GPU). Every method checks every
// word it gathers (word i of the dataset holds i) and ends dependent runs
// with the same row ids, so they are checked against each other too.
//
// Locations: hostmem (a host-memory namespace), pagecache (a file whose pages
// are in the page cache), odirect (the same file read with O_DIRECT: deepwell
// through the controller and tiling only).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/memcpy_ceiling.hpp"
#include "deepwell/views/array.hpp"
#include "tiling_gatherer.hpp"

using namespace deepwell;
using namespace deepwell::bench;
using json = nlohmann::json;

namespace {

struct shape {
  uint64_t rows;
  uint32_t words;  // 64-bit words per row
};

__host__ __device__ inline uint64_t next_row(uint64_t word0, unsigned hop, uint64_t rows) {
  return mix(word0 ^ (uint64_t(hop + 1) * 0x9E3779B97F4A7C15ull)) % rows;
}
inline uint64_t start_row(uint64_t j, uint64_t rows) { return mix(j * 0x2545F4914F6CDD1Dull + 17) % rows; }

// The warp checks the row it gathered at dst (row r); returns bad words.
__device__ unsigned check_row(const uint64_t* dst, uint64_t r, shape s) {
  unsigned bad = 0;
  for (uint32_t w = threadIdx.x & 31; w < s.words; w += 32) bad += dst[w] != r * s.words + w;
  return bad;
}

// Row sources, each fetching a whole row into GPU memory with the warp.
struct cache_source {
  array_ref<uint64_t> a;
  __device__ bool fetch(uint64_t* dst, uint64_t r, shape s) const {
    return a.read_range(gpu_warp{}, dst, r * s.words, s.words).ok();
  }
};
struct pointer_source {  // zero-copy host memory, or unified memory
  const uint4* p;
  __device__ bool fetch(uint64_t* dst, uint64_t r, shape s) const {
    const uint4* src = p + r * (s.words / 2);
    for (uint32_t v = threadIdx.x & 31; v < s.words / 2; v += 32) reinterpret_cast<uint4*>(dst)[v] = src[v];
    __syncwarp();
    return true;
  }
};

// One warp per chain: hop after hop, each row id from the previous row.
template <class Source>
__global__ void chain_kernel(Source src, const uint64_t* start, uint64_t* out, uint64_t n, unsigned hops, shape s,
                             uint64_t* final_rows, unsigned long long* bad) {
  const uint64_t j = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (j >= n) return;
  uint64_t r = start[j];
  unsigned wrong = 0;
  for (unsigned h = 0; h < hops; ++h) {
    uint64_t* dst = out + j * s.words;
    if (!src.fetch(dst, r, s)) {
      wrong += 1;
      break;
    }
    __syncwarp();
    wrong += check_row(dst, r, s);
    r = next_row(dst[0], h, s.rows);
  }
  if ((threadIdx.x & 31) == 0) final_rows[j] = r;
  if (wrong) atomicAdd(bad, wrong);
}

// Independent rows, warps striding over the batch.
template <class Source>
__global__ void bulk_kernel(Source src, const uint64_t* rows, uint64_t* out, uint64_t n, shape s,
                            unsigned long long* bad) {
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  unsigned wrong = 0;
  for (uint64_t j = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; j < n; j += warps) {
    uint64_t* dst = out + j * s.words;
    if (!src.fetch(dst, rows[j], s)) {
      wrong += 1;
      continue;
    }
    __syncwarp();
    wrong += check_row(dst, rows[j], s);
  }
  if (wrong) atomicAdd(bad, wrong);
}

// The tiling baseline's GPU step between hops: check the gathered rows and
// compute the next ids.
__global__ void check_next_kernel(const uint64_t* out, const uint64_t* rows, uint64_t* next, uint64_t n, unsigned hop,
                                  shape s, unsigned long long* bad) {
  const uint64_t j = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (j >= n) return;
  const unsigned wrong = check_row(out + j * s.words, rows[j], s);
  if ((threadIdx.x & 31) == 0) next[j] = next_row(out[j * s.words], hop, s.rows);
  if (wrong) atomicAdd(bad, wrong);
}

// The tiling baseline's check of a bulk batch (warps striding over rows).
__global__ void check_rows_kernel(const uint64_t* out, const uint64_t* rows, uint64_t n, shape s,
                                  unsigned long long* bad) {
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  unsigned wrong = 0;
  for (uint64_t j = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; j < n; j += warps)
    wrong += check_row(out + j * s.words, rows[j], s);
  if (wrong) atomicAdd(bad, wrong);
}

template <class T>
struct device_buffer {
  T* p = nullptr;
  explicit device_buffer(uint64_t n) { check_cuda(cudaMalloc(&p, n * sizeof(T) + 16), "cudaMalloc"); }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

struct result {
  double seconds = 0, cpu_seconds = 0;
  unsigned long long bad = 0;
  std::vector<uint64_t> final_rows;
};

struct gather_runs {
  shape s;
  uint64_t batch, hops, bulk_rows;
  unsigned reps;
  std::vector<uint64_t> start, bulk_idx;
  device_buffer<uint64_t> d_start, d_bulk, d_out, d_final, d_next;
  device_buffer<unsigned long long> d_bad;

  gather_runs(shape s_, uint64_t batch_, unsigned hops_, uint64_t bulk_, unsigned reps_)
      : s(s_), batch(batch_), hops(hops_), bulk_rows(bulk_), reps(reps_), d_start(batch_), d_bulk(bulk_),
        d_out(std::max(batch_, bulk_) * s_.words), d_final(batch_), d_next(batch_), d_bad(1) {
    for (uint64_t j = 0; j < batch; ++j) start.push_back(start_row(j, s.rows));
    for (uint64_t j = 0; j < bulk_rows; ++j) bulk_idx.push_back(mix(j + 0xB01C) % s.rows);
    cudaMemcpy(d_start.p, start.data(), batch * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(d_bulk.p, bulk_idx.data(), bulk_rows * 8, cudaMemcpyHostToDevice);
  }
  unsigned grid_for_warps(uint64_t warps) const { return unsigned((warps * 32 + 255) / 256); }

  // Runs `once` reps + 1 times, the first a warm-up, `before` untimed ahead
  // of each; `once` returns its seconds, `cpu` reads the CPU seconds of the
  // method's own threads (the controller's pollers, the tiling threads; 0
  // where it has none). Averages both into r.
  template <class Before, class Cpu, class Once>
  void repeat(result& r, Before before, Cpu cpu, Once once) const {
    for (unsigned rep = 0; rep <= reps; ++rep) {
      before();
      const double c0 = cpu();
      const double secs = once();
      if (rep > 0) {
        r.seconds += secs / reps;
        r.cpu_seconds += (cpu() - c0) / reps;
      }
    }
  }
  unsigned long long bad_words() const {
    unsigned long long bad = 0;
    check_cuda(cudaMemcpy(&bad, d_bad.p, 8, cudaMemcpyDeviceToHost), "read the check count");
    return bad;
  }
  template <class Launch>
  static double kernel_seconds(Launch launch) {
    timer t;
    t.start();
    launch();
    return t.stop();
  }
  static double wall_seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // The GPU-side methods (deepwell, zero-copy, unified memory): `before`
  // empties the cache or moves pages back.
  template <class Source, class Before, class Cpu>
  result gpu_dependent(Source src, Before before, Cpu cpu) {
    result r;
    cudaMemset(d_bad.p, 0, 8);
    repeat(r, before, cpu, [&] {
      return kernel_seconds([&] {
        chain_kernel<<<grid_for_warps(batch), 256>>>(src, d_start.p, d_out.p, batch, unsigned(hops), s, d_final.p,
                                                     d_bad.p);
      });
    });
    r.final_rows.resize(batch);
    cudaMemcpy(r.final_rows.data(), d_final.p, batch * 8, cudaMemcpyDeviceToHost);
    r.bad = bad_words();
    return r;
  }
  template <class Source, class Before, class Cpu>
  result gpu_bulk(Source src, Before before, Cpu cpu, unsigned grid) {
    result r;
    cudaMemset(d_bad.p, 0, 8);
    repeat(r, before, cpu, [&] {
      return kernel_seconds([&] { bulk_kernel<<<grid, 256>>>(src, d_bulk.p, d_out.p, bulk_rows, s, d_bad.p); });
    });
    r.bad = bad_words();
    return r;
  }

  result tiling_dependent(tiling_gatherer& g) {
    result r;
    cudaMemset(d_bad.p, 0, 8);
    uint64_t* h_rows;
    check_cuda(cudaMallocHost(&h_rows, batch * 8), "cudaMallocHost");
    auto restart = [&] {
      std::copy(start.begin(), start.end(), h_rows);
      cudaMemcpy(d_next.p, h_rows, batch * 8, cudaMemcpyHostToDevice);
    };
    repeat(r, restart, [&] { return g.cpu_seconds(); }, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (unsigned h = 0; h < hops; ++h) {
        if (!g.gather(h_rows, batch, d_out.p)) r.bad += 1;
        // The rows are on the GPU; ids of this hop are in d_next (copied
        // there as the previous hop's output): check, compute the next ids.
        check_next_kernel<<<grid_for_warps(batch), 256>>>(d_out.p, d_next.p, d_final.p, batch, h, s, d_bad.p);
        check_cuda(cudaMemcpy(h_rows, d_final.p, batch * 8, cudaMemcpyDeviceToHost), "cudaMemcpy ids");
        cudaMemcpy(d_next.p, d_final.p, batch * 8, cudaMemcpyDeviceToDevice);
      }
      return wall_seconds(t0);
    });
    r.final_rows.assign(h_rows, h_rows + batch);
    cudaFreeHost(h_rows);
    r.bad += bad_words();
    return r;
  }
  result tiling_bulk(tiling_gatherer& g) {
    result r;
    cudaMemset(d_bad.p, 0, 8);
    repeat(r, [] {}, [&] { return g.cpu_seconds(); }, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      if (!g.gather(bulk_idx.data(), bulk_rows, d_out.p)) r.bad += 1;
      return wall_seconds(t0);
    });
    // Checked after the timing (the GPU-side methods check inside their
    // kernels, which costs them HBM time only).
    check_rows_kernel<<<1024, 256>>>(d_out.p, d_bulk.p, bulk_rows, s, d_bad.p);
    r.bad += bad_words();
    return r;
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", file_path = "/var/tmp/deepwell-array-bench.dat";
  std::vector<std::string> locations{"hostmem", "pagecache"};
  uint64_t data_bytes = 4ull << 30, cache_bytes = 512ull << 20, batch = 1024, bulk_rows = 65536;
  uint32_t row_bytes = 4096;
  unsigned hops = 8, reps = 3, pollers = 8, queues = 128, entries = 512;
  std::vector<unsigned> tiling_threads{8, 16}, chunk_rows{32, 256};
  CLI::App app{"deepwell gather benchmark: dependent and bulk row gathers against tiling, zero-copy and UVM"};
  app.add_option("--locations", locations, "hostmem, pagecache, odirect")
      ->check(CLI::IsMember({"hostmem", "pagecache", "odirect"}));
  app.add_option("--file", file_path, "file for pagecache/odirect (written with the pattern if short)");
  app.add_option("--data", data_bytes, "dataset bytes");
  app.add_option("--cache", cache_bytes, "deepwell cache bytes");
  app.add_option("--row", row_bytes, "row bytes (a multiple of 512)");
  app.add_option("--batch", batch, "rows per dependent batch");
  app.add_option("--hops", hops, "dependent batches in a chain");
  app.add_option("--bulk-rows", bulk_rows, "rows in the bulk batch");
  app.add_option("--reps", reps, "measured repetitions (after one warm-up)");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--queues", queues, "cache queue pairs");
  app.add_option("--queue-entries", entries, "entries per queue");
  app.add_option("--tiling-threads", tiling_threads,
                 "CPU threads of the tiling baseline (several: each tried, the best compared against)");
  app.add_option("--chunk-rows", chunk_rows, "rows per pinned buffer of the tiling baseline (several: each tried)");
  app.add_option("--json", json_path, "append results as JSON lines");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  try {
    if (row_bytes % 512 || row_bytes == 0) throw error("--row must be a positive multiple of 512");
    data_bytes = data_bytes / row_bytes * row_bytes;
    const shape s{data_bytes / row_bytes, row_bytes / 8};
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const double link = measure_h2d_gbps();
    std::printf("ceilings: cudaMemcpy H2D %.1f GB/s; dataset %.1f GiB of %u-byte rows, cache %.0f MiB\n", link,
                data_bytes / double(1 << 30), row_bytes, cache_bytes / double(1 << 20));
    gather_runs b(s, batch, hops, bulk_rows, reps);
    const unsigned bulk_grid = prop.multiProcessorCount * 8;

    controller_config cc;
    cc.pollers = pollers;
    controller ctl(cc);
    std::shared_ptr<target> mem;
    bool failed_any = false;

    for (const std::string& loc : locations) {
      std::shared_ptr<target> t;
      const void* host = nullptr;
      int fd = -1;
      if (loc == "hostmem") {
        if (!mem) {
          mem = make_host_memory_target(data_bytes, false);
          fill_pattern(mem->host_pointer(), data_bytes);
        }
        t = mem;
        host = mem->host_pointer();
      } else {
        ensure_pattern_file(file_path, data_bytes);
        if (loc == "pagecache") read_through(file_path, data_bytes);  // its pages in the page cache
        file_options fo;
        fo.length = data_bytes;
        fo.direct = loc == "odirect";
        t = open_file_target(file_path, fo);
        fd = ::open(file_path.c_str(), O_RDONLY | (loc == "odirect" ? O_DIRECT : 0));
        if (fd < 0) throw error(errno_message("open " + file_path, errno));
      }
      const uint32_t nsid = ctl.add_namespace({t, 512, true});

      struct method {
        std::string name, path;
        result dep, bulk;
      };
      auto no_threads = [] { return 0.0; };
      std::vector<method> ms;
      // Tiling: the baseline.
      // Tiling, each configuration: the best is what deepwell is held to.
      for (unsigned tt : tiling_threads)
        for (unsigned cr : chunk_rows) {
          tiling_gatherer g(host, fd, row_bytes, tt, cr);
          method m{"tiling", std::to_string(tt) + " threads x " + std::to_string(cr) + " rows"};
          m.dep = b.tiling_dependent(g);
          m.bulk = b.tiling_bulk(g);
          ms.push_back(std::move(m));
        }
      const size_t tilings = ms.size();
      // deepwell, direct tier (where there is one) and through the controller.
      for (bool direct : {true, false}) {
        if (direct && loc == "odirect") continue;
        cache_config cfg;
        cfg.page_size = 4096;
        cfg.capacity_bytes = cache_bytes;
        cfg.queue_pairs = queues;
        cfg.queue_entries = entries;
        cfg.direct_tier = direct;
        auto cache = make_gpu_page_cache(ctl, cfg);
        array<uint64_t> a(cache, nsid);
        const bool has_direct = cache->dataset(0).source.mapped() != nullptr;
        if (direct && !has_direct) {
          std::printf("%s: no direct tier (file not resident?), skipping deepwell-direct\n", loc.c_str());
          continue;
        }
        auto empty = [&] {
          if (!cache->clear().ok()) throw error("cache clear failed");
        };
        method m{"deepwell", direct ? "direct" : "controller"};
        auto pollers_cpu = [&] { return ctl.poller_cpu_seconds(); };
        m.dep = b.gpu_dependent(cache_source{a.ref()}, empty, pollers_cpu);
        m.bulk = b.gpu_bulk(cache_source{a.ref()}, empty, pollers_cpu, bulk_grid);
        if (cache->last_error().code != client_code::ok && m.dep.bad + m.bulk.bad == 0) m.dep.bad = 1;
        ms.push_back(std::move(m));
      }
      // Zero-copy from pinned host memory (EMOGI).
      if (loc != "odirect") {
        std::optional<zero_copy_view> v;
        if (host)
          v.emplace(const_cast<void*>(host), data_bytes);
        else
          v.emplace(file_path, data_bytes);
        method m{"zero_copy", "direct"};
        const pointer_source src{static_cast<const uint4*>(v->device())};
        m.dep = b.gpu_dependent(src, [] {}, no_threads);
        m.bulk = b.gpu_bulk(src, [] {}, no_threads, bulk_grid);
        ms.push_back(std::move(m));
      }
      // Unified memory, only where the data fits (never oversubscribed).
      size_t free_mem = 0, total_mem = 0;
      cudaMemGetInfo(&free_mem, &total_mem);
      if (host && data_bytes < free_mem / 2) {
        void* um;
        check_cuda(cudaMallocManaged(&um, data_bytes), "cudaMallocManaged");
        fill_pattern(um, data_bytes);
        cudaMemLocation cpu{};
        cpu.type = cudaMemLocationTypeHost;
        auto back_to_host = [&] {
          check_cuda(cudaMemPrefetchAsync(um, data_bytes, cpu, 0, 0), "cudaMemPrefetchAsync");
          check_cuda(cudaDeviceSynchronize(), "prefetch to host");
        };
        method m{"unified_memory", "faults"};
        const pointer_source src{static_cast<const uint4*>(um)};
        m.dep = b.gpu_dependent(src, back_to_host, no_threads);
        m.bulk = b.gpu_bulk(src, back_to_host, no_threads, bulk_grid);
        cudaFree(um);
        ms.push_back(std::move(m));
      }
      if (fd >= 0) ::close(fd);

      // Report, each against tiling; dependent runs must agree on the ids.
      size_t best_dep = 0, best_bulk = 0;
      for (size_t i = 0; i < tilings; ++i) {
        if (ms[i].dep.seconds < ms[best_dep].dep.seconds) best_dep = i;
        if (ms[i].bulk.seconds < ms[best_bulk].bulk.seconds) best_bulk = i;
      }
      struct {
        result dep, bulk;
      } base{ms[best_dep].dep, ms[best_bulk].bulk};
      const json tiling_best = {{"dependent_gbps", double(batch) * hops * row_bytes / base.dep.seconds / 1e9},
                                {"dependent_config", ms[best_dep].path},
                                {"dependent_cpu_cores", base.dep.cpu_seconds / base.dep.seconds},
                                {"bulk_gbps", double(bulk_rows) * row_bytes / base.bulk.seconds / 1e9},
                                {"bulk_config", ms[best_bulk].path},
                                {"bulk_cpu_cores", base.bulk.cpu_seconds / base.bulk.seconds}};
      const double dep_bytes = double(batch) * hops * row_bytes, bulk_bytes = double(bulk_rows) * row_bytes;
      for (const method& m : ms) {
        const bool same = m.dep.final_rows == ms.front().dep.final_rows;
        const bool ok = same && m.dep.bad == 0 && m.bulk.bad == 0;
        failed_any |= !ok;
        std::printf("gather %s %-14s %-21s dependent %u x %llu rows: %.3f ms/hop (%.2f GB/s) x%.2f of best tiling, %.2f cores; "
                    "bulk %llu rows: %.1f GB/s x%.2f of best tiling, %.2f cores%s\n",
                    loc.c_str(), m.name.c_str(), m.path.c_str(), hops, (unsigned long long)batch,
                    m.dep.seconds / hops * 1e3, dep_bytes / m.dep.seconds / 1e9, base.dep.seconds / m.dep.seconds,
                    m.dep.cpu_seconds / m.dep.seconds, (unsigned long long)bulk_rows, bulk_bytes / m.bulk.seconds / 1e9,
                    base.bulk.seconds / m.bulk.seconds, m.bulk.cpu_seconds / m.bulk.seconds,
                    ok ? "" : (same ? "  WRONG DATA" : "  DIFFERENT ROW IDS"));
        json j;
        j["benchmark"] = "gather";
        j["commit"] = commit;
        j["device"] = prop.name;
        j["config"] = {{"location", loc},        {"method", m.name},         {"path", m.path},
                       {"row_bytes", row_bytes}, {"data_bytes", data_bytes}, {"cache_bytes", cache_bytes},
                       {"batch", batch},         {"hops", hops},             {"bulk_rows", bulk_rows},
                       {"reps", reps},           {"pollers", pollers}};
        j["metrics"] = {{"dependent_seconds", m.dep.seconds},
                        {"dependent_ms_per_hop", m.dep.seconds / hops * 1e3},
                        {"dependent_gbps", dep_bytes / m.dep.seconds / 1e9},
                        {"dependent_cpu_cores", m.dep.cpu_seconds / m.dep.seconds},
                        {"bulk_seconds", m.bulk.seconds},
                        {"bulk_gbps", bulk_bytes / m.bulk.seconds / 1e9},
                        {"bulk_cpu_cores", m.bulk.cpu_seconds / m.bulk.seconds},
                        {"bad_words", m.dep.bad + m.bulk.bad},
                        {"same_row_ids_as_tiling", same}};
        j["ceilings"] = {{"h2d_memcpy_gbps", link}};
        j["baselines"] = {{"tiling_best", tiling_best}};
        j["ratios"] = {{"dependent_vs_tiling", base.dep.seconds / m.dep.seconds},
                       {"bulk_vs_tiling", base.bulk.seconds / m.bulk.seconds},
                       {"bulk_vs_h2d", bulk_bytes / m.bulk.seconds / 1e9 / link}};
        if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
      }
    }
    return failed_any ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_gather_bench: %s\n", e.what());
    return 2;
  }
}
