// Checkpoint save bandwidth (durable/checkpoint.hpp) of device buffers
// against the disk's own: prints one JSON object.
//
//  disk      the same bytes as one large sequential O_DIRECT write (pwrite of
//            8 MiB chunks from pinned memory, already copied from the GPU)
//            plus fdatasync: the disk's write bandwidth
//  cpu_path  what a program does without deepwell: cudaMemcpy to pinned host
//            memory, buffered pwrite, fdatasync (copies included)
//  deepwell  checkpoint_store::save of the device buffers through a GPU page
//            cache to an O_DIRECT file (every buffer changed since the slot
//            was written: a full save), made durable; after two warm-up saves
//            that allocate both slots, as the baselines write over an
//            allocated file
// Goal: checkpoint_vs_disk_write_bw >= 0.9. Also reported: the first save
// (cold: the cache fetches the pages it overwrites), an incremental save of
// 1% changed pages (bytes written), and load (read and checked).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
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

__global__ void fill(uint64_t* p, uint64_t words, uint64_t seed) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = bench::mix(i ^ (seed << 40));
}

// Adds 1 to the first word of every `every`-th page of `per_page` words (every = 1: all pages).
__global__ void touch(uint64_t* p, uint64_t words, uint64_t per_page, uint64_t every) {
  for (uint64_t pg = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; pg * every * per_page < words;
       pg += uint64_t(gridDim.x) * blockDim.x)
    p[pg * every * per_page] += 1;
}

void die_errno(const std::string& what) { throw error(errno_message(what, errno)); }

// Writes `bytes` from `buf` to fd at 0 in `chunk` pieces, then fdatasync; seconds.
double write_file(int fd, const uint8_t* buf, uint64_t bytes, uint64_t chunk) {
  const double t0 = now_s();
  for (uint64_t o = 0; o < bytes; o += chunk) {
    const uint64_t n = std::min(chunk, bytes - o);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd, buf + o + done, n - done, off_t(o + done));
      if (w < 0) die_errno("pwrite");
      done += uint64_t(w);
    }
  }
  if (::fdatasync(fd) != 0) die_errno("fdatasync");
  return now_s() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/var/tmp", commit = "unknown", json_path;
  uint64_t bytes = 256ull << 20;
  uint32_t tensors = 16, page = 65536, iters = 3, pollers = 4;
  uint32_t queue_pairs = defaults::builtin::checkpoint_gpu_queue_pairs;
  uint32_t queue_entries = defaults::builtin::checkpoint_queue_entries;
  bool odirect = true;
  CLI::App app{"deepwell checkpoint save bandwidth against the disk's write bandwidth"};
  app.add_option("--dir", dir, "directory of the files (on the disk under test)");
  app.add_option("--bytes", bytes, "bytes of device buffers");
  app.add_option("--tensors", tensors, "number of buffers");
  app.add_option("--page", page, "cache page size (the unit of the page hashes)");
  app.add_option("--iters", iters, "timed saves (and baseline runs)");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--queue-pairs", queue_pairs, "the cache's queue pairs (default: a checkpoint store's)");
  app.add_option("--queue-entries", queue_entries, "entries per queue pair (default: a checkpoint store's)");
  app.add_option("--odirect", odirect, "the checkpoint file with O_DIRECT (1) or buffered (0)");
  app.add_option("--json", json_path, "also append the JSON line to this file");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  try {
    const uint64_t each = (bytes / tensors) / 4096 * 4096;
    bytes = each * tensors;
    checkpoint_manifest m;
    std::vector<void*> dev(tensors);
    for (uint32_t i = 0; i < tensors; ++i) {
      m.push_back({"layer" + std::to_string(i) + ".weight", each, "float32", {int64_t(each / 4)}});
      check_cuda(cudaMalloc(&dev[i], each), "cudaMalloc");
      fill<<<1024, 256>>>(static_cast<uint64_t*>(dev[i]), each / 8, i + 1);
    }
    check_cuda(cudaDeviceSynchronize(), "fill");
    auto touch_all = [&](uint64_t every) {
      for (uint32_t i = 0; i < tensors; ++i) touch<<<256, 256>>>(static_cast<uint64_t*>(dev[i]), each / 8, page / 8, every);
      check_cuda(cudaDeviceSynchronize(), "touch");
    };
    checkpoint_buffers bufs;
    for (uint32_t i = 0; i < tensors; ++i) bufs[m[i].name] = device_buffer(dev[i], each);

    // ---- baselines ----
    uint8_t* pinned = nullptr;
    check_cuda(cudaMallocHost(reinterpret_cast<void**>(&pinned), bytes), "cudaMallocHost");
    auto d2h = [&] {
      for (uint32_t i = 0; i < tensors; ++i)
        check_cuda(cudaMemcpy(pinned + uint64_t(i) * each, dev[i], each, cudaMemcpyDeviceToHost), "cudaMemcpy");
    };
    const std::string raw_path = dir + "/deepwell-ckpt-bench.raw", cpu_path = dir + "/deepwell-ckpt-bench.cpu",
                      ck_path = dir + "/deepwell-ckpt-bench.ckpt";
    int raw = ::open(raw_path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (raw < 0) die_errno("open " + raw_path + " (O_DIRECT)");
    d2h();
    write_file(raw, pinned, bytes, 8ull << 20);  // allocate the file's blocks once
    std::vector<double> disk_s, disk_copy_s, cpu_s;
    for (uint32_t k = 0; k < iters; ++k) {
      touch_all(1);
      const double t0 = now_s();
      d2h();
      const double t1 = now_s();
      const double w = write_file(raw, pinned, bytes, 8ull << 20);
      disk_s.push_back(w);
      disk_copy_s.push_back(w + (t1 - t0));
    }
    ::close(raw);
    int cpu = ::open(cpu_path.c_str(), O_RDWR | O_CREAT, 0644);
    if (cpu < 0) die_errno("open " + cpu_path);
    d2h();
    write_file(cpu, pinned, bytes, 8ull << 20);
    for (uint32_t k = 0; k < iters; ++k) {
      touch_all(1);
      const double t0 = now_s();
      d2h();
      write_file(cpu, pinned, bytes, 8ull << 20);
      cpu_s.push_back(now_s() - t0);
    }
    ::close(cpu);

    // ---- deepwell ----
    const uint64_t need = checkpoint_store::bytes_needed(m, page);
    ::unlink(ck_path.c_str());
    controller_config cc;
    cc.pollers = pollers;
    controller ctl(cc);
    file_options fo;
    fo.writable = true;
    fo.create = true;
    fo.create_size = need;
    fo.direct = odirect;
    auto t = open_file_target(ck_path, fo);
    const uint32_t ns = ctl.add_namespace({t, std::max<uint32_t>(512, t->io_alignment()), false});
    cache_config c;
    c.page_size = page;
    c.capacity_bytes = need + (64ull << 20);  // both slots stay cached: saves write, never fetch
    c.queue_pairs = queue_pairs;
    c.queue_entries = queue_entries;
    auto cache = make_gpu_page_cache(ctl, c);
    checkpoint_options o;
    o.gpu = gpu_checkpoint_support();
    o.label = ck_path;
    auto store = checkpoint_store::create(cache, ns, m, o);
    const save_report first = store->save(bufs);  // cold: slot 1's pages fetched (holes) before written
    touch_all(1);
    store->save(bufs);  // slot 0 allocated
    std::vector<double> ck_s;
    save_report full{};
    for (uint32_t k = 0; k < iters; ++k) {
      touch_all(1);
      full = store->save(bufs);
      ck_s.push_back(full.seconds);
    }
    store->save(bufs);  // both slots hold the same bytes now
    touch_all(100);     // 1% of the units changed since the slot the next save writes
    const save_report inc = store->save(bufs);
    // load: read back and checked
    std::vector<double> load_s;
    for (uint32_t k = 0; k < iters; ++k) {
      const double t0 = now_s();
      store->load(bufs);
      load_s.push_back(now_s() - t0);
    }

    const double gb = double(bytes) / 1e9;
    const double disk_bw = gb / median(disk_s), ck_bw = gb / median(ck_s), cpu_bw = gb / median(cpu_s);
    json j;
    j["bench"] = "checkpoint";
    j["commit"] = commit;
    j["bytes"] = bytes;
    j["tensors"] = tensors;
    j["page"] = page;
    j["queue_pairs"] = queue_pairs;
    j["queue_entries"] = queue_entries;
    j["pollers"] = pollers;
    j["odirect"] = odirect;
    j["disk_write_GBps"] = disk_bw;
    j["disk_write_with_d2h_GBps"] = gb / median(disk_copy_s);
    j["cpu_path_GBps"] = cpu_bw;
    j["checkpoint_save_GBps"] = ck_bw;
    j["checkpoint_save_seconds"] = ck_s;
    j["checkpoint_save_split_s"] = {{"hash", full.hash_seconds}, {"copy", full.copy_seconds}, {"persist", full.persist_seconds}};
    j["checkpoint_first_save_GBps"] = gb / first.seconds;
    j["checkpoint_vs_disk_write_bw"] = ck_bw / disk_bw;
    j["checkpoint_vs_cpu_path"] = ck_bw / cpu_bw;
    j["incremental_1pct"] = {{"seconds", inc.seconds}, {"bytes_written", inc.bytes_written},
                             {"units_written", inc.units_written}, {"units_total", inc.units_total}};
    j["load_GBps"] = gb / median(load_s);
    j["goal_checkpoint_vs_disk_write_bw"] = 0.9;
    j["deepwell_env"] = bench::deepwell_env();
    std::printf("%s\n", j.dump().c_str());
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "a");
      if (f) {
        std::fprintf(f, "%s\n", j.dump().c_str());
        std::fclose(f);
      }
    }
    store.reset();
    cache.reset();
    for (void* p : dev) cudaFree(p);
    cudaFreeHost(pinned);
    ::unlink(raw_path.c_str());
    ::unlink(cpu_path.c_str());
    ::unlink(ck_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
}
