// Block benchmark with GPU clients: every GPU thread issues requests through
// the controller's queues (no cache), BaM's block benchmark on deepwell's
// software controller. Beside it, in the same run, the host link's ceiling
// (cudaMemcpy host-to-device, pinned, 1 GiB). Prints one line and appends
// JSON.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "deepwell/link/memcpy_ceiling.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "bench_common.cuh"
#include "uring_loop.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

struct counters {
  unsigned long long ok, failed, checksum;
};

// The lanes of a warp that are together move each other's blocks across the
// link, one block at a time, with 16-byte accesses (coalesced: a lane's own
// block read by that lane alone would cross PCIe in 16-byte pieces). Reads
// load every byte from staging after the completion, writes store every
// byte before the submit. With touch_all false a read loads only the first
// word (the controller's request rate, the data left in host memory).
__device__ uint64_t move_blocks(uint8_t* mine, bool have, uint32_t block_bytes, bool write, uint64_t stamp) {
  const unsigned m = __activemask();
  const unsigned lane = threadIdx.x & 31;
  const unsigned rank = __popc(m & ((1u << lane) - 1)), lanes = __popc(m);
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (unsigned todo = __ballot_sync(m, have); todo; todo &= todo - 1) {
    const unsigned l = __ffs(todo) - 1;
    uint4* b = reinterpret_cast<uint4*>(__shfl_sync(m, reinterpret_cast<uintptr_t>(mine), l));
    const uint64_t st = __shfl_sync(m, stamp, l);
    for (uint32_t v = rank; v < block_bytes / 16; v += lanes) {
      if (write) {
        b[v] = make_uint4(uint32_t(st), uint32_t(st >> 32), v, 0);
      } else {
        const uint4 x = b[v];
        acc.x ^= x.x;
        acc.y ^= x.y;
        acc.z ^= x.z;
        acc.w ^= x.w;
      }
    }
  }
  return acc.x ^ acc.y ^ acc.z ^ acc.w;
}
__global__ void block_kernel(const queue_ref* qs, unsigned nq, uint32_t nsid, uint64_t blocks, uint32_t block_bytes,
                             unsigned per_thread, bool write, bool sequential, bool touch_all, counters* out) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = uint64_t(gridDim.x) * blockDim.x;
  const queue_ref q = qs[(tid / 32) % nq];
  uint64_t x = tid * 0x9E3779B97F4A7C15ull + 7;
  unsigned long long ok = 0, failed = 0, sum = 0;
  for (unsigned i = 0; i < per_thread; ++i) {
    uint64_t lba;
    if (sequential) {
      lba = (uint64_t(i) * nthreads + tid) % blocks;
    } else {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      lba = x % blocks;
    }
    const uint64_t deadline = now_ns() + 30'000'000'000ull;
    uint16_t cid;
    if (!q.acquire_cid(cid, deadline).ok()) {
      ++failed;
      break;
    }
    const uint64_t off = q.buffer_offset(cid);
    if (write) move_blocks(q.buffer(cid), true, touch_all ? block_bytes : 16, true, lba);
    q.submit(cid, write ? nvme::make_write(nsid, lba, 1, off) : nvme::make_read(nsid, lba, 1, off));
    wait_result r = q.wait(cid, deadline);
    if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
      ++failed;
      break;
    }
    if (r.status.ok()) {
      ++ok;
      if (!write) sum += move_blocks(q.buffer(cid), true, touch_all ? block_bytes : 16, false, 0);
    } else {
      ++failed;
    }
    q.release_cid(cid);
  }
  atomicAdd(&out->ok, ok);
  atomicAdd(&out->failed, failed);
  atomicAdd(&out->checksum, sum);
}

}  // namespace

int main(int argc, char** argv) {
  std::string location = "hostmem", path, op = "read", pattern = "random", touch = "all", json_path, commit = "unknown";
  bool direct = false;
  uint64_t size = 1ull << 30, requests = 0, max_bytes = 0, staging_cap = 1ull << 30;
  std::vector<uint32_t> blocks{4096};
  std::vector<unsigned> thread_counts{1u << 16};
  unsigned per_thread = 16, queues = 32, entries = 1024, pollers = 4;
  CLI::App app{"deepwell block benchmark with GPU clients"};
  app.add_option("--location", location, "null | hostmem | file | model (modelled drives, striped)")
      ->check(CLI::IsMember({"null", "hostmem", "file", "model"}));
  unsigned drives = 1;
  uint64_t chunk = 4096, drive_iops = 1'500'000, drive_latency_ns = 80'000;
  app.add_option("--drives", drives, "with --location model: modelled drives, striped");
  app.add_option("--chunk", chunk, "with --location model: the stripe's chunk bytes");
  app.add_option("--drive-iops", drive_iops, "with --location model: each drive's IOPS");
  app.add_option("--drive-latency-ns", drive_latency_ns, "with --location model: each drive's latency");
  app.add_option("--path", path, "file for --location file (created if missing)");
  app.add_flag("--direct", direct, "O_DIRECT");
  app.add_option("--size", size, "dataset bytes");
  app.add_option("--block", blocks, "bytes per request (several: one run each)");
  app.add_option("--threads", thread_counts, "GPU threads (several: one run each)");
  app.add_option("--per-thread", per_thread, "requests per GPU thread");
  app.add_option("--requests", requests, "requests per run, spread over the threads (overrides --per-thread)");
  app.add_option("--max-bytes", max_bytes, "with --requests: at most this many bytes per run (large blocks)");
  app.add_option("--queues", queues, "queue pairs");
  app.add_option("--queue-entries", entries, "entries per SQ/CQ (fewer where staging would pass --staging-cap)");
  app.add_option("--staging-cap", staging_cap, "most bytes of staging buffers per run");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--op", op, "read | write")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--pattern", pattern, "random | seq")->check(CLI::IsMember({"random", "seq"}));
  app.add_option("--touch", touch,
                 "all: the GPU reads (writes) every byte of each block from (into) staging; word: only the first "
                 "word (the controller's request rate, the data left in host memory)")
      ->check(CLI::IsMember({"all", "word"}));
  app.add_option("--json", json_path, "append the result as one JSON line");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  try {
    const uint32_t largest = *std::max_element(blocks.begin(), blocks.end());
    size = size / largest * largest;
    controller_config cc;
    cc.pollers = pollers;
    controller ctl(cc);
    std::shared_ptr<target> t;
    if (location == "null") {
      t = make_null_target(size);
    } else if (location == "hostmem") {
      t = make_host_memory_target(size, true);
      // Written once, as a loaded dataset would be: otherwise the first read
      // of each page would fault a zero page in on the controller's time.
      std::memset(t->host_pointer(), 0x5A, size);
    } else if (location == "model") {
      // Host memory behind a device model a drive, striped: the controller's
      // scaling over drives where there are none (drive_array.hpp).
      drive_model dm;
      dm.iops = drive_iops;
      dm.latency_ns = drive_latency_ns;
      std::vector<std::shared_ptr<target>> members;
      const uint64_t per = (size / drives + chunk - 1) / chunk * chunk;
      for (unsigned i = 0; i < drives; ++i) members.push_back(make_model_drive_target(per, dm));
      t = make_striped_target(members, chunk);
      size = std::min<uint64_t>(size, t->size()) / largest * largest;
    } else {
      if (path.empty()) throw error("--location file needs --path");
      bench::ensure_pattern_file(path, size);
      file_options fo;
      fo.direct = direct;
      fo.writable = op == "write";
      fo.length = size;
      t = open_file_target(path, fo);
    }
    const double link = measure_h2d_gbps();
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    int status = 0;
    for (const uint32_t block : blocks) {
      const uint32_t nsid = ctl.add_namespace({t, block, op != "write"});
      const unsigned qe = unsigned(std::max<uint64_t>(16, std::min<uint64_t>(entries, staging_cap / (uint64_t(queues) * block))));
      std::vector<std::unique_ptr<gpu_queue_client>> clients;
      std::vector<queue_ref> refs;
      for (unsigned i = 0; i < queues; ++i) {
        clients.push_back(std::make_unique<gpu_queue_client>(ctl.create_queue_pair({qe, qe, block})));
        refs.push_back(clients.back()->ref());
      }
      queue_ref* d_refs;
      counters* d_out;
      check_cuda(cudaMalloc(&d_refs, sizeof(queue_ref) * queues), "cudaMalloc");
      check_cuda(cudaMemcpy(d_refs, refs.data(), sizeof(queue_ref) * queues, cudaMemcpyHostToDevice), "cudaMemcpy");
      check_cuda(cudaMalloc(&d_out, sizeof(counters)), "cudaMalloc");
      for (const unsigned threads : thread_counts) {
        const uint64_t want = max_bytes ? std::min<uint64_t>(requests, max_bytes / block) : requests;
        const unsigned pt = requests ? unsigned(std::max<uint64_t>(1, want / threads)) : per_thread;
        const unsigned tpb = 256;
        const unsigned grid = (threads + tpb - 1) / tpb;
        // Warm-up: a short run, then the measured one.
        cudaMemset(d_out, 0, sizeof(counters));
        block_kernel<<<grid, tpb>>>(d_refs, queues, nsid, size / block, block, 1, op == "write", pattern == "seq",
                                    touch == "all", d_out);
        check_cuda(cudaDeviceSynchronize(), "warm-up kernel");
        cudaMemset(d_out, 0, sizeof(counters));
        const double cpu0 = ctl.poller_cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        block_kernel<<<grid, tpb>>>(d_refs, queues, nsid, size / block, block, pt, op == "write", pattern == "seq",
                                    touch == "all", d_out);
        check_cuda(cudaGetLastError(), "launch");
        check_cuda(cudaDeviceSynchronize(), "kernel");
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double cpu = ctl.poller_cpu_seconds() - cpu0;
        counters c{};
        cudaMemcpy(&c, d_out, sizeof(c), cudaMemcpyDeviceToHost);
        const double gbps = double(c.ok) * block / secs / 1e9;
        json j;
        j["benchmark"] = "block";
        j["clients"] = "gpu";
        j["commit"] = commit;
        j["device"] = prop.name;
        j["staging_stores"] = bench::staging_stores_name();
        j["env"] = bench::deepwell_env();
        j["config"] = {{"location", location}, {"direct", direct}, {"size", size}, {"block", block},
                       {"threads", threads},   {"per_thread", pt}, {"queues", queues}, {"queue_entries", qe},
                       {"pollers", pollers},   {"op", op}, {"pattern", pattern}, {"backend", ctl.backend_name()},
                       {"path_kind", "controller"}, {"gpu_touches", touch}};
        if (location == "model")
          j["config"]["model"] = {{"drives", drives}, {"chunk", chunk}, {"drive_iops", drive_iops},
                                  {"drive_latency_ns", drive_latency_ns}};
        j["metrics"] = {{"requests", c.ok},
                        {"failed", c.failed},
                        {"seconds", secs},
                        {"iops", c.ok / secs},
                        {"gbps", gbps},
                        {"poller_cpu_seconds", cpu},
                        {"controller_ns_per_request", c.ok ? cpu / c.ok * 1e9 : 0.0},
                        {"controller_cores", cpu / secs},
                        {"controller_cores_per_10gbps", gbps > 0 ? cpu / secs / (gbps / 10) : 0.0},
                        {"controller_cores_per_miops", c.ok ? cpu / secs / (c.ok / secs / 1e6) : 0.0}};
        j["ceilings"] = {{"h2d_memcpy_gbps", link}};
        j["ratios"] = {{"vs_h2d", gbps / link}};
        if (location == "file") {
          // The storage path without deepwell: an io_uring loop over the same
          // file, block size, operation and per-core depth, on as many cores
          // as pollers.
          const unsigned depth = std::max(1u, std::min(256u, unsigned(uint64_t(queues) * (qe - 1) / pollers)));
          json b = uring_loop(path, direct, size, block, depth, pollers, std::max(2.0, secs), op == "write");
          j["baselines"]["uring_loop_same_cores"] = b;
          j["ratios"]["vs_uring_loop_same_cores"] = (c.ok / secs) / double(b["iops"]);
          std::printf("  io_uring loop, %u threads, depth %u: %.2f M IOPS; deepwell/loop = %.2f\n", pollers, depth,
                      double(b["iops"]) / 1e6, double(j["ratios"]["vs_uring_loop_same_cores"]));
        }
        std::printf("gpu block %s %s %s touch=%s bs=%u threads=%u queues=%u pollers=%u: %.2f M IOPS %.2f GB/s (%.2f of H2D %.1f "
                    "GB/s), %.2f controller cores, failed %llu\n",
                    location.c_str(), op.c_str(), pattern.c_str(), touch.c_str(), block, threads, queues, pollers, c.ok / secs / 1e6,
                    gbps, gbps / link, link, cpu / secs, c.failed);
        if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
        if (c.failed) status = 1;
      }
      clients.clear();
      cudaFree(d_refs);
      cudaFree(d_out);
    }
    ctl.stop();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_block_bench: %s\n", e.what());
    return 2;
  }
}
