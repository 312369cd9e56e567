// The key-value store's durable batched SETs (durable/kv_store.hpp, a
// table of a few GiB on a file, through a GPU page cache) against CAP,
// CPU-assisted persistence: the same batch's keys and values computed on
// the GPU, copied to pinned host memory, written by CPU threads into a hash
// table file (pwrite of each pair at its slot) and fdatasync'ed. Prints one
// JSON object: SETs per second of each, kvs_set_vs_cap (goal >= 5),
// kvs_set_vs_rocksdb when RocksDB's number is given (bench/rocksdb_kv_bench),
// and the disk's floor for the store's work measured by a plain program
// (kvs_time_vs_floor; kvs_set_vs_cap_ceiling, the most this disk allows).
//
// Both sides time the same work per batch: generating the batch on the GPU,
// then making it durable. The store's number includes the checkpoints it ran
// when its log filled and one at the end (so the table itself is durable on
// the file, as CAP's is), unless --no-final-checkpoint.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"

using namespace deepwell;
using namespace deepwell::durable;
using json = nlohmann::json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The keys and values the RocksDB baseline (rocksdb_kv_bench.cpp) makes too.
__host__ __device__ inline uint64_t mix(uint64_t x) { return deepwell::detail::fmix64(x); }

// Batch b: key i is a random key of [0, key_space); its value words are
// derived from the key and the batch (so a later GET can check them).
__global__ void make_batch(uint64_t b, uint64_t n, uint64_t key_space, uint32_t vw, uint64_t* keys, uint64_t* values) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t k = mix(b * 0x9E3779B97F4A7C15ull + i + 1) % key_space;
  keys[i] = k;
  for (uint32_t j = 0; j < vw; ++j) values[i * vw + j] = mix(k * 31 + j) ^ b;
}

void cuda_ok(cudaError_t e, const char* what) { check_cuda(e, what); }

}  // namespace

int main(int argc, char** argv) {
  uint64_t table_gib_x10 = 20;  // table size in tenths of a GiB
  uint32_t value_bytes = 32;
  uint64_t batch = 1 << 16;
  uint32_t batches = 48, warmup = 4;
  uint64_t cache_bytes = 6ull << 30;
  uint32_t log_rows = 1 << 20;
  uint32_t cap_threads = 16;
  unsigned pollers = 4;
  std::string dir = "/var/tmp";
  std::string json_path;
  double rocksdb_sets = 0;
  bool final_checkpoint = true, keep = false;
  CLI::App app{"deepwell key-value store: durable batched SETs vs CPU-assisted persistence (CAP)"};
  app.add_option("--table-gib-x10", table_gib_x10, "table size in tenths of a GiB (20: 2 GiB)");
  app.add_option("--value-bytes", value_bytes, "value size (8 to 128, a multiple of 8)");
  app.add_option("--batch", batch, "SETs per batch");
  app.add_option("--batches", batches, "measured batches");
  app.add_option("--warmup", warmup, "batches before measuring");
  app.add_option("--cache-bytes", cache_bytes, "GPU page cache (page data)");
  app.add_option("--log-rows", log_rows, "rows of the store's log (1 KiB each)");
  app.add_option("--cap-threads", cap_threads, "CPU threads writing CAP's table");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--dir", dir, "where the files go (a disk, not tmpfs)");
  app.add_option("--rocksdb-sets-per-s", rocksdb_sets, "RocksDB's SETs per second (bench/rocksdb_kv_bench)");
  app.add_option("--json", json_path, "also append the JSON object to this file");
  app.add_flag("!--no-final-checkpoint", final_checkpoint, "do not count a checkpoint at the end");
  app.add_flag("--keep", keep, "keep the files");
  bool no_checksums = false;
  app.add_flag("--no-checksums", no_checksums, "a store without table checksums (format 1): what the checks cost");
  CLI11_PARSE(app, argc, argv);

  const uint32_t vw = value_bytes / 8;
  const uint64_t table_bytes = table_gib_x10 * (1ull << 30) / 10;
  kv_config cfg;
  cfg.value_bytes = value_bytes;
  cfg.bucket_bytes = 4096;
  cfg.log_rows = log_rows;
  cfg.table_checksums = !no_checksums;
  const uint64_t slots_per_bucket = 4096 / (8 + value_bytes);
  cfg.buckets = table_bytes / 4096;
  const uint64_t slots = cfg.buckets * slots_per_bucket;
  const uint64_t key_space = slots * 3 / 4 * 2;  // random keys: the table ends well below full
  const std::string kv_path = dir + "/deepwell-kv-bench.kv", cap_path = dir + "/deepwell-kv-bench.cap";

  uint64_t *d_keys = nullptr, *d_values = nullptr;
  cuda_ok(cudaMalloc(&d_keys, batch * 8), "cudaMalloc");
  cuda_ok(cudaMalloc(&d_values, batch * value_bytes), "cudaMalloc");
  const unsigned gen_blocks = unsigned((batch + 255) / 256);

  json out;
  out["bench"] = "gpu_kv";
  out["value_bytes"] = value_bytes;
  out["key_bytes"] = 8;
  out["batch"] = batch;
  out["batches"] = batches;
  out["table_bytes"] = table_bytes;
  out["cache_bytes"] = cache_bytes;
  out["log_rows"] = log_rows;
  out["table_checksums"] = !no_checksums;
  out["dir"] = dir;

  // ---- the store ----
  double kv_time = 0, kv_time_no_ckpt = 0, final_ckpt_s = 0;
  uint64_t kv_ckpts = 0, kv_rows = 0, kv_inserted = 0, kv_updated = 0;
  bool verified = false;
  {
    controller_config cc;
    cc.pollers = pollers;
    controller ctl(cc);
    cache_config c;
    c.page_size = 4096;
    c.capacity_bytes = cache_bytes;
    c.direct_files = cache_config::file_tier::never;
    auto cache = make_gpu_page_cache(ctl, c);
    kv_options o;
    o.executor = gpu_kv_support();
    o.max_batch = batch;
    const double t0 = now_s();
    kv_store kv = kv_store::create_file(cache, kv_path, cfg, o);
    {  // the file's blocks allocated, as CAP's are
      const int fd = ::open(kv_path.c_str(), O_RDWR);
      if (fd >= 0) {
        (void)posix_fallocate(fd, 0, off_t(kv_store::bytes_needed(cfg)));
        ::close(fd);
      }
    }
    out["kvs_create_s"] = now_s() - t0;
    for (uint32_t b = 0; b < warmup + batches; ++b) {
      const double s0 = now_s();
      make_batch<<<gen_blocks, 256>>>(b, batch, key_space, vw, d_keys, d_values);
      cuda_ok(cudaDeviceSynchronize(), "make_batch");
      const kv_batch_result r = kv.set(d_keys, d_values, batch, kv_memory::device);
      const double dt = now_s() - s0;
      if (b < warmup) continue;
      kv_time += dt;
      if (!r.checkpointed) kv_time_no_ckpt += dt;
      kv_ckpts += r.checkpointed;
      kv_rows += r.log_rows;
      kv_inserted += r.inserted;
      kv_updated += r.updated;
    }
    if (final_checkpoint) {
      const double s0 = now_s();
      kv.checkpoint();
      final_ckpt_s = now_s() - s0;
      kv_time += final_ckpt_s;
    }
    // The last batch reads back.
    std::vector<uint64_t> keys(batch), values(batch * vw), got(batch * vw);
    cuda_ok(cudaMemcpy(keys.data(), d_keys, batch * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_ok(cudaMemcpy(values.data(), d_values, batch * value_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::vector<uint8_t> st(batch);
    kv.get(keys.data(), got.data(), batch, kv_memory::host, st.data());
    uint64_t bad = 0;
    for (uint64_t i = 0; i < batch; ++i) bad += st[i] != kv_ok;
    // (A key repeated in the batch holds its last value; values are a
    // function of key and batch, so every copy agrees.)
    bad += got != values;
    verified = bad == 0;
    out["kvs_checkpoints"] = kv_ckpts;
    out["kvs_final_checkpoint_s"] = final_ckpt_s;
    out["kvs_log_rows_per_batch"] = double(kv_rows) / batches;
    out["kvs_inserted"] = kv_inserted;
    out["kvs_updated"] = kv_updated;
    const cache_stats cs = cache->stats();
    out["kvs_cache_misses"] = cs.misses;
    out["kvs_cache_writebacks"] = cs.writebacks;
  }
  const uint64_t measured = uint64_t(batch) * batches;
  const double kv_rate = measured / kv_time;
  out["kvs_sets_per_s"] = kv_rate;
  out["kvs_sets_per_s_batches_only"] =
      kv_time_no_ckpt > 0 ? double(batch) * (batches - kv_ckpts) / kv_time_no_ckpt : 0.0;
  out["kvs_verified"] = verified;

  // ---- CAP: GPU -> pinned host memory -> pwrite by CPU threads -> fdatasync ----
  double cap_time = 0;
  {
    const uint64_t rec = 8 + value_bytes;
    const uint64_t cap_slots = slots;
    const int fd = ::open(cap_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw error("cannot create " + cap_path);
    if (posix_fallocate(fd, 0, off_t(cap_slots * rec)) != 0) throw error("cannot allocate " + cap_path);
    if (::fsync(fd) != 0) throw error("fsync of " + cap_path);
    uint64_t *h_keys = nullptr, *h_values = nullptr;
    cuda_ok(cudaMallocHost(&h_keys, batch * 8), "cudaMallocHost");
    cuda_ok(cudaMallocHost(&h_values, batch * value_bytes), "cudaMallocHost");
    std::atomic<uint64_t> failed{0};
    for (uint32_t b = 0; b < warmup + batches; ++b) {
      const double s0 = now_s();
      make_batch<<<gen_blocks, 256>>>(b, batch, key_space, vw, d_keys, d_values);
      cuda_ok(cudaMemcpy(h_keys, d_keys, batch * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
      cuda_ok(cudaMemcpy(h_values, d_values, batch * value_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      std::vector<std::thread> ts;
      for (uint32_t t = 0; t < cap_threads; ++t)
        ts.emplace_back([&, t] {
          uint8_t r[8 + 128];
          for (uint64_t i = t; i < batch; i += cap_threads) {
            std::memcpy(r, &h_keys[i], 8);
            std::memcpy(r + 8, &h_values[i * vw], value_bytes);
            const uint64_t slot = mix(h_keys[i] + 1) % cap_slots;  // direct-mapped: no probing (CAP's best case)
            if (::pwrite(fd, r, rec, off_t(slot * rec)) != ssize_t(rec)) ++failed;
          }
        });
      for (auto& t : ts) t.join();
      if (::fdatasync(fd) != 0) ++failed;
      const double dt = now_s() - s0;
      if (b >= warmup) cap_time += dt;
    }
    cudaFreeHost(h_keys);
    cudaFreeHost(h_values);
    ::close(fd);
    out["cap_failed_writes"] = failed.load();
    out["cap_threads"] = cap_threads;
  }
  // ---- the disk's floor for the store's work, by a plain program: each
  // measured batch's pairs appended to a file and fdatasync'ed (what makes a
  // SET durable), then the table's bytes written in 1 MiB sequential writes
  // and fdatasync'ed (what the final checkpoint must put on the disk). No
  // store can do this work faster on this disk; CAP's time over it is the
  // largest kvs_set_vs_cap the disk allows a store that logs and checkpoints.
  double floor_log_s = 0, floor_table_s = 0;
  {
    const std::string floor_path = dir + "/deepwell-kv-bench.floor";
    const uint64_t pair_bytes = batch * (8 + value_bytes);
    const uint64_t chunk = 1 << 20;
    std::vector<uint8_t> buf(std::max(pair_bytes, chunk));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(mix(i) | 1);  // not zeros: no file system shortcut
    const uint64_t log_bytes = pair_bytes * batches;
    const int fd = ::open(floor_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw error("cannot create " + floor_path);
    if (posix_fallocate(fd, 0, off_t(log_bytes + table_bytes)) != 0) throw error("cannot allocate " + floor_path);
    if (::fsync(fd) != 0) throw error("fsync of " + floor_path);
    auto write_all = [&](uint64_t at, uint64_t bytes) {
      for (uint64_t done = 0; done < bytes;) {
        const ssize_t w = ::pwrite(fd, buf.data(), std::min(bytes - done, uint64_t(buf.size())), off_t(at + done));
        if (w <= 0) throw error("write of " + floor_path + " failed");
        done += uint64_t(w);
      }
    };
    double s0 = now_s();
    for (uint32_t b = 0; b < batches; ++b) {
      write_all(uint64_t(b) * pair_bytes, pair_bytes);
      if (::fdatasync(fd) != 0) throw error("fdatasync of " + floor_path);
    }
    floor_log_s = now_s() - s0;
    s0 = now_s();
    write_all(log_bytes, table_bytes);
    if (::fdatasync(fd) != 0) throw error("fdatasync of " + floor_path);
    floor_table_s = now_s() - s0;
    ::close(fd);
    ::unlink(floor_path.c_str());
  }
  const double floor_s = floor_log_s + (final_checkpoint ? floor_table_s : 0);
  out["floor_log_s"] = floor_log_s;
  out["floor_table_s"] = floor_table_s;
  out["floor_s"] = floor_s;
  out["kvs_time_vs_floor"] = kv_time / floor_s;
  out["kvs_set_vs_cap_ceiling"] = cap_time / floor_s;
  out["kvs_final_checkpoint_vs_floor_table"] = final_checkpoint ? final_ckpt_s / floor_table_s : 0.0;

  const double cap_rate = measured / cap_time;
  out["cap_sets_per_s"] = cap_rate;
  out["kvs_set_vs_cap"] = kv_rate / cap_rate;
  out["goal_kvs_set_vs_cap"] = 5;
  if (rocksdb_sets > 0) {
    out["rocksdb_sets_per_s"] = rocksdb_sets;
    out["kvs_set_vs_rocksdb"] = kv_rate / rocksdb_sets;
    out["kvs_set_vs_rocksdb_ceiling"] = double(measured) / rocksdb_sets / floor_s;
    out["goal_kvs_set_vs_rocksdb"] = 3;
  }
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  out["gpu"] = prop.name;
  cudaFree(d_keys);
  cudaFree(d_values);
  if (!keep) {
    ::unlink(kv_path.c_str());
    ::unlink(cap_path.c_str());
  }
  const std::string line = out.dump();
  std::cout << line << std::endl;
  if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << line << "\n";
  return verified ? 0 : 1;
}
