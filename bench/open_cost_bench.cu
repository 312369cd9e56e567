// Where opening a checkpoint store goes: a save that opens its store (as
// deepwell.checkpoint.save does) pays for a controller, the dataset, a GPU
// cache (queue pairs with pinned staging, the cache's memory) and the
// store's superblocks before it writes a byte, and for tearing them down
// after. Each step is timed apart, per repetition, beside the primitives
// under it measured in the same run: a memfd of the staging's bytes touched
// and registered with CUDA (what each queue pair's staging costs), and a
// cudaMalloc of the cache's bytes. With --save, each repetition also saves
// device buffers of --bytes (every page changed) between open and close.
// Prints one JSON line.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/checkpoint.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__global__ void bump(uint64_t* p, uint64_t words) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] += 0x9e3779b97f4a7c15ull;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A memfd of `bytes`, mapped, touched and registered with CUDA, then undone:
// seconds of each step.
json staging_primitive(uint64_t bytes) {
  const double t0 = now_s();
  const int fd = memfd_create("dw-open-probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) throw error(errno_message("memfd", errno));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw error(errno_message("mmap", errno));
  const double t1 = now_s();
  for (uint64_t o = 0; o < bytes; o += 4096) static_cast<volatile uint8_t*>(p)[o] = 0;
  const double t2 = now_s();
  check_cuda(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable), "cudaHostRegister");
  const double t3 = now_s();
  check_cuda(cudaHostUnregister(p), "cudaHostUnregister");
  const double t4 = now_s();
  munmap(p, bytes);
  close(fd);
  const double t5 = now_s();
  return {{"bytes", bytes},     {"create_s", t1 - t0},     {"touch_s", t2 - t1},
          {"register_s", t3 - t2}, {"unregister_s", t4 - t3}, {"unmap_s", t5 - t4}};
}

std::string device_name() {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  return prop.name;
}

// Ways to give a memfd of `bytes` its pages before cudaHostRegister, each
// timed to the end of the registration: as the library does (registration
// faults them in), touched by one thread, MAP_POPULATE, fallocate,
// MADV_POPULATE_WRITE, touched by `threads` threads, and touched after
// MADV_HUGEPAGE (shmem huge pages where the kernel allows them).
json population_primitives(uint64_t bytes, unsigned threads) {
  json out;
  auto one = [&](const char* name, auto&& populate, int map_flags) {
    const int fd = memfd_create("dw-open-probe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) throw error(errno_message("memfd", errno));
    const double t0 = now_s();
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | map_flags, fd, 0);
    if (p == MAP_FAILED) throw error(errno_message("mmap", errno));
    const int rc = populate(fd, static_cast<uint8_t*>(p));
    const double t1 = now_s();
    check_cuda(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable), "cudaHostRegister");
    const double t2 = now_s();
    check_cuda(cudaHostUnregister(p), "cudaHostUnregister");
    munmap(p, bytes);
    close(fd);
    const double t3 = now_s();
    out[name] = {{"populate_s", t1 - t0}, {"register_s", t2 - t1}, {"total_s", t2 - t0}, {"free_s", t3 - t2}, {"rc", rc}};
  };
  auto touch = [&](uint8_t* p, uint64_t lo, uint64_t hi) {
    for (uint64_t o = lo; o < hi; o += 4096) reinterpret_cast<volatile uint8_t*>(p)[o] = 0;
  };
  one("register_untouched", [](int, uint8_t*) { return 0; }, 0);
  one("touch_1", [&](int, uint8_t* p) { touch(p, 0, bytes); return 0; }, 0);
  one("map_populate", [](int, uint8_t*) { return 0; }, MAP_POPULATE);
  one("fallocate", [&](int fd, uint8_t*) { return fallocate(fd, 0, 0, off_t(bytes)) == 0 ? 0 : errno; }, 0);
  one("madv_populate_write", [&](int, uint8_t* p) { return madvise(p, bytes, 23 /* MADV_POPULATE_WRITE */) == 0 ? 0 : errno; }, 0);
  one("touch_threads", [&](int, uint8_t* p) {
    std::vector<std::thread> ts;
    const uint64_t per = (bytes / threads + 4095) / 4096 * 4096;
    for (unsigned i = 0; i < threads; ++i)
      ts.emplace_back([&, i] { touch(p, std::min(bytes, i * per), std::min(bytes, (i + 1) * per)); });
    for (auto& t : ts) t.join();
    return 0;
  }, 0);
  one("hugepage_touch", [&](int, uint8_t* p) {
    const int rc = madvise(p, bytes, MADV_HUGEPAGE) == 0 ? 0 : errno;
    touch(p, 0, bytes);
    return rc;
  }, 0);
  for (const char* f : {"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/shmem_enabled"}) {
    std::string v;
    if (FILE* fp = std::fopen(f, "r")) {
      char buf[256] = {};
      if (std::fgets(buf, sizeof buf, fp)) v = buf;
      std::fclose(fp);
    }
    while (!v.empty() && v.back() == '\n') v.pop_back();
    out[f] = v;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/var/tmp", commit = "unknown", json_path;
  uint64_t bytes = 512ull << 20, cache_bytes = 0;
  uint32_t page = defaults::builtin::checkpoint_page_size, reps = 5;
  uint32_t queue_pairs = defaults::builtin::checkpoint_gpu_queue_pairs;
  uint32_t queue_entries = defaults::builtin::checkpoint_queue_entries;
  bool odirect = true, save = true, population = false;
  CLI::App app{"deepwell: what opening and closing a checkpoint store costs, step by step"};
  app.add_option("--dir", dir, "directory of the store's file");
  app.add_option("--bytes", bytes, "bytes of the store's one buffer");
  app.add_option("--cache", cache_bytes, "GPU cache bytes (0: twice --bytes and 256 MiB, as the Python benchmark)");
  app.add_option("--page", page, "cache page size");
  app.add_option("--queue-pairs", queue_pairs, "the cache's queue pairs (default: a checkpoint store's)");
  app.add_option("--queue-entries", queue_entries, "entries per queue pair (default: a checkpoint store's)");
  app.add_option("--reps", reps, "repetitions");
  app.add_option("--odirect", odirect, "the store's file with O_DIRECT");
  app.add_option("--save", save, "save the buffer between open and close");
  app.add_option("--population", population, "also time ways of populating the staging's pages");
  app.add_option("--json", json_path, "also append the JSON line to this file");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  try {
    if (cache_bytes == 0) cache_bytes = 2 * bytes + (256ull << 20);
    const std::string path = dir + "/deepwell-open-cost.ckpt";
    check_cuda(cudaFree(nullptr), "context");
    void* dev = nullptr;
    check_cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
    check_cuda(cudaMemset(dev, 1, bytes), "cudaMemset");
    const checkpoint_manifest m{{"w", bytes, "uint8", {int64_t(bytes)}}};
    checkpoint_buffers bufs{{"w", device_buffer(dev, bytes)}};

    cache_config cfg;
    cfg.page_size = page;
    cfg.capacity_bytes = cache_bytes;
    cfg.queue_pairs = queue_pairs;
    cfg.queue_entries = queue_entries;
    cfg.direct_files = cache_config::file_tier::never;
    controller_config cc;
    checkpoint_options so;
    so.gpu = gpu_checkpoint_support();
    const dataset_request req{path, true, odirect, std::min(page, odirect ? 4096u : 512u)};
    {  // the store, and both slots written once (as the Python benchmark's warm-up saves)
      ::unlink(path.c_str());
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0 || ::ftruncate(fd, off_t(checkpoint_store::bytes_needed(m, page))) != 0)
        throw error(errno_message("creating " + path, errno));
      ::close(fd);
      auto link = embedded_link(cc);
      const uint32_t nsid = link->open_dataset(req);
      auto cache = make_gpu_page_cache(link, cfg);
      auto s = checkpoint_store::create(cache, nsid, m, so);
      s->save(bufs);
      bump<<<1024, 256>>>(static_cast<uint64_t*>(dev), bytes / 8);
      s->save(bufs);
    }

    json runs = json::array();
    std::map<std::string, std::vector<double>> steps;
    for (uint32_t r = 0; r < reps; ++r) {
      bump<<<1024, 256>>>(static_cast<uint64_t*>(dev), bytes / 8);
      check_cuda(cudaDeviceSynchronize(), "bump");
      json one;
      double t = now_s();
      const double start = t;
      auto lap = [&](const char* name) {
        const double n = now_s();
        one[name] = n - t;
        steps[name].push_back(n - t);
        t = n;
      };
      auto link = embedded_link(cc);
      lap("controller_s");
      const uint32_t nsid = link->open_dataset(req);
      lap("dataset_s");
      auto cache = make_gpu_page_cache(link, cfg);
      lap("cache_s");
      auto s = checkpoint_store::open(cache, nsid, so);
      lap("store_open_s");
      if (save) {
        const save_report sr = s->save(bufs);
        lap("save_s");
        for (auto [name, v] : {std::pair{"save_hash_s", sr.hash_seconds}, {"save_copy_s", sr.copy_seconds},
                               {"save_persist_s", sr.persist_seconds}}) {
          one[name] = v;
          steps[name].push_back(v);
        }
      }
      s.reset();
      lap("store_close_s");
      cache.reset();
      lap("cache_close_s");
      link.reset();
      lap("controller_close_s");
      one["total_s"] = t - start;
      steps["total_s"].push_back(t - start);
      runs.push_back(one);
    }
    json med;
    for (auto& [k, v] : steps) med[k] = median(v);
    // The primitives under the cache's step, in the same run.
    const uint64_t staging = uint64_t(queue_pairs) * queue_entries * page;
    json prim;
    prim["staging_all_queue_pairs"] = staging_primitive(staging);
    prim["staging_one_queue_pair"] = staging_primitive(uint64_t(queue_entries) * page);
    if (population) prim["population"] = population_primitives(staging, 8);
    {
      void* p = nullptr;
      const double t0 = now_s();
      check_cuda(cudaMalloc(&p, cache_bytes), "cudaMalloc");
      const double t1 = now_s();
      check_cuda(cudaFree(p), "cudaFree");
      prim["cuda_malloc_cache_s"] = t1 - t0;
      prim["cuda_free_cache_s"] = now_s() - t1;
    }
    json out = {{"bench", "open_cost"},
                {"commit", commit},
                {"device", device_name()},
                {"config",
                 {{"bytes", bytes},
                  {"cache_bytes", cache_bytes},
                  {"page", page},
                  {"queue_pairs", queue_pairs},
                  {"queue_entries", queue_entries},
                  {"staging_bytes", staging},
                  {"odirect", odirect},
                  {"save", save},
                  {"reps", reps}}},
                {"median", med},
                {"primitives", prim},
                {"runs", runs}};
    ::unlink(path.c_str());
    check_cuda(cudaFree(dev), "cudaFree");
    const std::string line = out.dump();
    std::puts(line.c_str());
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "a");
      if (f) {
        std::fprintf(f, "%s\n", line.c_str());
        std::fclose(f);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "open_cost_bench: %s\n", e.what());
    return 1;
  }
}
