// One GPU client of issue 15's server benchmarks (bench/probes/server-bench
// runs several of them beside `deepwell serve` and computes the ratios).
// It reads dataset words (word i holds i, bench_common.cuh's pattern)
// through a GPU page cache, either from a server (DEEPWELL_SERVER set:
// --dataset is a name the server offers) or embedded (--dataset is a file
// this process serves with a controller of its own). Modes:
//   flood   all-miss 4 KiB random reads (one element per page, pages hashed
//           over the dataset, far larger than the cache) for --seconds
//   sparse  one thread, dependent random reads with a pause between them,
//           each timed on the GPU's clock: the latency of a light client
//   scan    every word of the dataset once, checked (a second reader of
//           what the first brought into the server's host tier)
//   h2d     cudaMemcpy from pinned host memory, the link's bandwidth
//   spin    every SM busy for --seconds with no I/O: a compute-bound
//           neighbour (another process's kernels share the GPU by time
//           slices unless MPS runs)
// Prints one JSON line. --start-at (CLOCK_REALTIME seconds) lets clients in
// separate processes start their measured window together.
#include <cuda_runtime.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One element of each of `count` random pages of the dataset.
__global__ void flood_kernel(array_ref<uint64_t> a, uint64_t seed, uint64_t count, uint64_t pages,
                             unsigned long long* wrong, unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= count) return;
  const uint64_t page = bench::mix(seed + tid) % pages;
  const uint64_t per_page = a.cache.page_size() / 8;
  const uint64_t i = page * per_page + (tid % per_page);
  request_status s;
  const uint64_t v = a.try_read(i, &s);
  if (!s.ok()) atomicAdd(failed, 1ull);
  else if (v != i) atomicAdd(wrong, 1ull);
}

__global__ void read_globaltimer(uint64_t* out) { *out = globaltimer(); }

// Every thread spins until the GPU's clock reaches `end_ns`.
__global__ void spin_kernel(uint64_t end_ns, unsigned long long* spins) {
  uint64_t n = 0;
  while (globaltimer() < end_ns) ++n;
  if (n == 0) atomicAdd(spins, 1ull);  // keeps the loop
}

// One thread: `count` dependent reads of random pages, `pause_ns` apart,
// each read's latency (ns) into lat[].
__global__ void sparse_kernel(array_ref<uint64_t> a, uint64_t seed, unsigned count, uint64_t pages,
                              unsigned pause_ns, uint64_t* lat, unsigned long long* wrong,
                              unsigned long long* failed) {
  const uint64_t per_page = a.cache.page_size() / 8;
  uint64_t carry = 0;
  for (unsigned k = 0; k < count; ++k) {
    const uint64_t page = bench::mix(seed + k + (carry & 1)) % pages;  // depends on the last value read
    const uint64_t i = page * per_page + (k % per_page);
    const uint64_t t0 = globaltimer();
    request_status s;
    const uint64_t v = a.try_read(i, &s);
    const uint64_t t1 = globaltimer();
    lat[k] = t1 - t0;
    if (!s.ok()) atomicAdd(failed, 1ull);
    else if (v != i) atomicAdd(wrong, 1ull);
    carry = v - i;
    for (unsigned waited = 0; waited < pause_ns; waited += 100000) __nanosleep(min(pause_ns - waited, 100000u));
  }
}

// Every word once, word i must hold i. Each warp reads whole 4 KiB pages
// (its lanes 32 words apart), the warps taking pages grid-stride: every
// warp has a page of its own in flight, as a scan through a paged cache
// should (a thread-per-word grid-stride loop puts 16 warps on each page
// and keeps only a few hundred pages in flight).
__global__ void scan_kernel(array_ref<uint64_t> a, uint64_t words, unsigned long long* wrong,
                            unsigned long long* failed) {
  constexpr uint64_t page_words = 4096 / 8;
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const uint64_t pages = (words + page_words - 1) / page_words;
  for (uint64_t p = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; p < pages; p += warps) {
    unsigned long long bad = 0, err = 0;
    for (uint64_t k = lane; k < page_words; k += 32) {
      const uint64_t i = p * page_words + k;
      if (i >= words) break;
      request_status s;
      const uint64_t v = a.try_read(i, &s);
      if (!s.ok()) ++err;
      else if (v != i) ++bad;
    }
    if (err) atomicAdd(failed, err);
    if (bad) atomicAdd(wrong, bad);
  }
}

// The same scan as a user would write it through page handles: each warp
// pins a whole cache page (one lookup) and its lanes check the words.
__global__ void scan_pages_kernel(array_ref<uint64_t> a, uint64_t words, unsigned long long* wrong,
                                  unsigned long long* failed) {
  const gpu_warp w;
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const uint64_t per_page = a.cache.page_size() / 8;
  const uint64_t pages = (words + per_page - 1) / per_page;
  for (uint64_t p = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; p < pages; p += warps) {
    page_handle<uint64_t> h = a.page(w, p * per_page);
    if (!h.ok()) {
      if (lane == 0) atomicAdd(failed, 1ull);
      continue;
    }
    unsigned long long bad = 0;
    for (uint64_t k = lane; k < h.count(); k += 32) bad += h[h.first() + k] != h.first() + k;
    h.release();
    if (bad) atomicAdd(wrong, bad);
  }
}

double now_realtime() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void wait_until(double t) {
  for (double d = t - now_realtime(); d > 0; d = t - now_realtime())
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(d, 0.05)));
}

double percentile(std::vector<uint64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return double(v[k]);
}

double h2d_gbps() {
  const uint64_t bytes = 256ull << 20;
  void* host = nullptr;
  void* dev = nullptr;
  check_cuda(cudaMallocHost(&host, bytes), "cudaMallocHost");
  check_cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    bench::timer t;
    t.start();
    check_cuda(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    best = std::max(best, bytes / t.stop() / 1e9);
  }
  cudaFree(dev);
  cudaFreeHost(host);
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"deepwell server benchmark client"};
  std::string mode = "flood", dataset, label;
  double seconds = 5, start_at = 0;
  uint64_t cache_mib = 256;
  bool direct_file = false, direct_tier = false;
  unsigned pollers = 0, queues = 0, sparse_pause_us = 200, sparse_reads = 64, page_kib = 4;
  std::string scan_by = "page";
  app.add_option("--mode", mode, "flood, sparse, scan, h2d or spin")
      ->check(CLI::IsMember({"flood", "sparse", "scan", "h2d", "spin"}));
  app.add_option("--dataset", dataset, "a dataset name (server mode) or a file (embedded)");
  app.add_option("--label", label, "a name for the JSON line");
  app.add_option("--seconds", seconds, "measured window (flood, sparse)");
  app.add_option("--start-at", start_at, "CLOCK_REALTIME second at which the window opens");
  app.add_option("--cache-mib", cache_mib, "GPU cache size");
  app.add_option("--queues", queues, "queue pairs (0: the default)");
  app.add_flag("--direct-io", direct_file, "embedded: open the file with O_DIRECT");
  app.add_flag("--direct-tier", direct_tier,
               "let the cache read host memory directly: resident file pages (embedded, or --direct-files), "
               "the server's host-tier arena (server)");
  std::string direct_files = "resident";
  app.add_option("--direct-files", direct_files, "with --direct-tier: map files never, when resident, or always")
      ->check(CLI::IsMember({"never", "resident", "always"}));
  app.add_option("--pollers", pollers, "embedded: controller pollers (0: the default)");
  app.add_option("--page-kib", page_kib, "the cache's page (KiB; a server's host tier is read directly only when "
                                         "its pages are this size)")
      ->check(CLI::IsMember({1u, 2u, 4u, 8u, 16u, 32u, 64u}));
  app.add_option("--scan-by", scan_by, "scan: a page handle per warp (page) or a read per word (element)")
      ->check(CLI::IsMember({"page", "element"}));
  app.add_option("--sparse-pause-us", sparse_pause_us, "sparse: pause between reads");
  app.add_option("--sparse-reads", sparse_reads, "sparse: reads per launch");
  CLI11_PARSE(app, argc, argv);

  json j;
  j["mode"] = mode;
  j["label"] = label;
  j["env"] = bench::deepwell_env();
  if (mode == "h2d") {
    j["h2d_gbps"] = h2d_gbps();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (mode == "spin") {
    int sms = 0;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    unsigned long long* spins;
    uint64_t* gpu_now;
    check_cuda(cudaMalloc(&spins, 8), "cudaMalloc");
    check_cuda(cudaMallocManaged(&gpu_now, 8), "cudaMallocManaged");
    spin_kernel<<<1, 1>>>(0, spins);  // context and module up before the window
    check_cuda(cudaDeviceSynchronize(), "spin warm-up");
    if (start_at > 0) wait_until(start_at);
    const double t0 = now_realtime();
    unsigned launches = 0;
    while (now_realtime() - t0 < seconds) {
      // 50 ms launches; the GPU's clock and CLOCK_REALTIME need not agree,
      // so each launch's end is read from the GPU's clock at its start.
      read_globaltimer<<<1, 1>>>(gpu_now);
      check_cuda(cudaDeviceSynchronize(), "read_globaltimer");
      spin_kernel<<<unsigned(sms) * 8, 256>>>(*gpu_now + 50'000'000ull, spins);
      check_cuda(cudaDeviceSynchronize(), "spin kernel");
      ++launches;
    }
    j["seconds"] = now_realtime() - t0;
    j["launches"] = launches;
    j["sms"] = sms;
    cudaFree(gpu_now);
    cudaFree(spins);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (dataset.empty()) throw error("--dataset is required");

  const std::string server = server_from_env();
  std::shared_ptr<controller_link> link;
  std::shared_ptr<controller> ctl;
  uint32_t ns = 0;
  if (!server.empty()) {
    auto s = server_link::connect(server, "server_bench:" + label);
    ns = s->lookup(dataset);
    link = s;
    j["via"] = "server";
  } else {
    controller_config cc;
    if (pollers) cc.pollers = pollers;
    ctl = std::make_shared<controller>(cc);
    file_options fo;
    fo.direct = direct_file;
    ns = ctl->add_namespace({open_file_target(dataset, fo), 4096, true});
    link = in_process_link(ctl);
    j["via"] = "embedded";
    j["direct_io"] = direct_file;
  }
  cache_config cfg;
  cfg.page_size = page_kib * 1024;
  cfg.capacity_bytes = cache_mib << 20;
  j["page_bytes"] = cfg.page_size;
  if (queues) cfg.queue_pairs = queues;
  cfg.direct_tier = direct_tier;
  cfg.direct_files = direct_files == "never"    ? cache_config::file_tier::never
                     : direct_files == "always" ? cache_config::file_tier::always
                                                : cache_config::file_tier::resident;
  auto cache = make_gpu_page_cache(link, cfg);
  array<uint64_t> a(cache, ns);
  const uint64_t words = a.size(), pages = words / (cfg.page_size / 8);
  j["dataset_bytes"] = words * 8;
  j["cache_bytes"] = cfg.capacity_bytes;
  j["direct_tier"] = cache->dataset(0).source.mapped() != nullptr;
  j["host_tier_arena"] = cache->dataset(0).source.kind == page_source_kind::shared_tier;

  unsigned long long *wrong, *failed;
  check_cuda(cudaMalloc(&wrong, 8), "cudaMalloc");
  check_cuda(cudaMalloc(&failed, 8), "cudaMalloc");
  cudaMemset(wrong, 0, 8);
  cudaMemset(failed, 0, 8);

  if (mode == "flood") {
    // Warm-up launch (first-touch costs), then launches until the window
    // closes; each sized to take about 50 ms.
    flood_kernel<<<64, 256>>>(a.ref(), 1ull << 40, 64 * 256, pages, wrong, failed);
    check_cuda(cudaDeviceSynchronize(), "flood warm-up");
    if (start_at > 0) wait_until(start_at);
    cache->reset_stats();
    const double cpu0 = ctl ? ctl->poller_cpu_seconds() : 0;
    const double t0 = now_realtime();
    uint64_t per = 8192, seed = 0, launched = 0;
    double busy = 0;
    while (now_realtime() - t0 < seconds) {
      bench::timer t;
      t.start();
      flood_kernel<<<unsigned((per + 255) / 256), 256>>>(a.ref(), seed, per, pages, wrong, failed);
      const double s = t.stop();
      busy += s;
      seed += per;
      launched += per;
      if (s < 0.025 && per < (1u << 22)) per *= 2;
      else if (s > 0.1 && per > 256) per /= 2;
    }
    const double wall = now_realtime() - t0;
    const cache_stats st = cache->stats();
    j["window_start"] = t0;
    j["seconds"] = wall;
    j["accesses"] = launched;
    j["misses"] = st.misses;
    j["miss_gbps"] = st.misses * 4096.0 / wall / 1e9;
    j["miss_mpages_per_s"] = st.misses / wall / 1e6;
    if (ctl) j["poller_cpu_seconds"] = ctl->poller_cpu_seconds() - cpu0;  // embedded: the pollers' CPU in the window
  } else if (mode == "sparse") {
    uint64_t* lat;
    check_cuda(cudaMalloc(&lat, sparse_reads * 8ull), "cudaMalloc");
    std::vector<uint64_t> all, chunk(sparse_reads);
    sparse_kernel<<<1, 1>>>(a.ref(), 7ull << 40, 4, pages, 0, lat, wrong, failed);  // warm-up
    check_cuda(cudaDeviceSynchronize(), "sparse warm-up");
    if (start_at > 0) wait_until(start_at);
    cache->reset_stats();
    const double t0 = now_realtime();
    uint64_t seed = 0;
    while (now_realtime() - t0 < seconds) {
      sparse_kernel<<<1, 1>>>(a.ref(), seed, sparse_reads, pages, sparse_pause_us * 1000u, lat, wrong, failed);
      check_cuda(cudaDeviceSynchronize(), "sparse kernel");
      cudaMemcpy(chunk.data(), lat, sparse_reads * 8ull, cudaMemcpyDeviceToHost);
      all.insert(all.end(), chunk.begin(), chunk.end());
      seed += sparse_reads * 1000003ull;
    }
    const cache_stats st = cache->stats();
    j["seconds"] = now_realtime() - t0;
    j["reads"] = all.size();
    j["misses"] = st.misses;
    j["hits"] = st.hits;
    j["p50_us"] = percentile(all, 0.5) / 1e3;
    j["p90_us"] = percentile(all, 0.9) / 1e3;
    j["p99_us"] = percentile(all, 0.99) / 1e3;
    j["max_us"] = percentile(all, 1.0) / 1e3;
    cudaFree(lat);
  } else {  // scan
    if (start_at > 0) wait_until(start_at);
    cache->reset_stats();
    bench::timer t;
    t.start();
    if (scan_by == "page")
      scan_pages_kernel<<<1024, 256>>>(a.ref(), words, wrong, failed);
    else
      scan_kernel<<<1024, 256>>>(a.ref(), words, wrong, failed);
    j["scan_by"] = scan_by;
    const double s = t.stop();
    const cache_stats st = cache->stats();
    j["seconds"] = s;
    j["gbps"] = words * 8.0 / s / 1e9;
    j["misses"] = st.misses;
    j["tier_fills"] = st.tier_fills;
    j["tier_retries"] = st.tier_retries;
  }
  unsigned long long w = 0, f = 0;
  cudaMemcpy(&w, wrong, 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost);
  j["wrong"] = w;
  j["failed"] = f;
  if (auto e = cache->last_error(); !e.ok()) j["last_error"] = describe(e);
  std::printf("%s\n", j.dump().c_str());
  cudaFree(wrong);
  cudaFree(failed);
  return w == 0 && f == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "server_bench: %s\n", e.what());
  return 2;
}
