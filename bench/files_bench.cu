// Issue 17's file-API benchmarks, each against its baseline measured in the
// same process:
//   stream  one kernel reads a multi-GiB file front to back through gread
//           (every warp a strided share of 256 KiB chunks, every word
//           checked), buffered with the file in the page cache (warm) or
//           with O_DIRECT (file_system_options::direct_io). Baselines:
//           cudaMemcpy from pinned host memory (gread_stream_vs_h2d), and
//           for O_DIRECT a plain io_uring loop reading the same file front
//           to back with 1 MiB requests, as fio would
//           (gread_stream_odirect_vs_fio).
//   opens   every warp opens, reads the first word of and closes small
//           files, as many as --files: gopen_gclose_per_s.
//   writes  every warp creates --files files of --write-kib each, written in
//           --piece-bytes pieces (not whole pages), three times, each pass
//           into a directory of its own made fresh (no pass truncates an
//           earlier pass's files): closed with gclose, with gclose_async,
//           and written once (g_gwronce) and closed with gclose_async;
//           every file checked word by word on the host after each.
//           gclose_async_vs_gclose: the closing warps' time inside the
//           close call (the stall), gclose_async's against gclose's;
//           gclose_async_kernel_vs_gclose: the whole kernel's time;
//           write_once_vs_plain: until the files are on the host
//           (file_system::sync), g_gwronce against plain.
// Files are made here (deterministic: word i of the stream file holds i;
// small file k starts with k) under --dir. Prints one JSON line.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"
#include "deepwell/link/memcpy_ceiling.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

constexpr uint64_t chunk_bytes = 256 << 10;

struct stream_job {
  gfs_ref fs;
  gfile file;
  uint64_t size;
  uint8_t* scratch;  // chunk_bytes per warp
  unsigned long long* wrong;
  unsigned long long* failed;
};

__global__ void open_file(stream_job* j, const char* path) {
  const gfile f = j->fs.gopen(gpu_full_warp{}, path, g_rdonly);
  if (threadIdx.x == 0) j->file = f;
}

__global__ void close_file(stream_job* j, int* result) {
  const int r = j->fs.gclose(gpu_full_warp{}, j->file);
  if (threadIdx.x == 0) *result = r;
}

__global__ void stream_kernel(const stream_job* jp) {
  const stream_job& j = *jp;
  const gpu_full_warp w;
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  uint8_t* mine = j.scratch + warp * chunk_bytes;
  const uint64_t chunks = (j.size + chunk_bytes - 1) / chunk_bytes;
  unsigned long long wrong = 0;
  for (uint64_t c = warp; c < chunks; c += warps) {
    const int64_t n = j.fs.gread(w, j.file, c * chunk_bytes, mine, chunk_bytes);
    if (n <= 0) {
      if (w.lane() == 0) atomicAdd(j.failed, 1ull);
      continue;
    }
    const uint64_t first = c * chunk_bytes / 8;
    const uint64_t* words = reinterpret_cast<const uint64_t*>(mine);
    for (uint64_t k = w.lane(); k < uint64_t(n) / 8; k += 32) wrong += words[k] != first + k;
  }
  if (wrong) atomicAdd(j.wrong, wrong);
}

struct opens_job {
  gfs_ref fs;
  const char* names;  // files * name_bytes, NUL-terminated
  uint32_t name_bytes;
  uint32_t files;
  unsigned long long* next;
  unsigned long long* wrong;
  unsigned long long* failed;
  unsigned long long* phase_ns;  // [3]: in gopen, gread, gclose, summed over warps
};

__global__ void opens_kernel(const opens_job* jp) {
  const opens_job& j = *jp;
  const gpu_full_warp w;
  for (;;) {
    unsigned long long k = 0;
    if (w.lane() == 0) k = atomicAdd(j.next, 1ull);
    k = __shfl_sync(~0u, k, 0);
    if (k >= j.files) return;
    const uint64_t t0 = now_ns();
    const gfile f = j.fs.gopen(w, j.names + k * j.name_bytes, g_rdonly);
    const uint64_t t1 = now_ns();
    if (!f.ok()) {
      if (w.lane() == 0) atomicAdd(j.failed, 1ull);
      continue;
    }
    // The warp's buffer is in shared memory: a gread's lanes share the copy.
    __shared__ uint64_t firsts[32];
    uint64_t& first = firsts[threadIdx.x / 32];
    if (w.lane() == 0) first = ~0ull;
    __syncwarp();
    const int64_t n = j.fs.gread(w, f, 0, &first, 8);
    if (w.lane() == 0 && (n != 8 || first != k)) atomicAdd(j.wrong, 1ull);
    const uint64_t t2 = now_ns();
    if (j.fs.gclose(w, f) != 0 && w.lane() == 0) atomicAdd(j.failed, 1ull);
    if (w.lane() == 0) {
      atomicAdd(j.phase_ns, (unsigned long long)(t1 - t0));
      atomicAdd(j.phase_ns + 1, (unsigned long long)(t2 - t1));
      atomicAdd(j.phase_ns + 2, (unsigned long long)(now_ns() - t2));
    }
  }
}

struct writes_job {
  gfs_ref fs;
  const char* names;
  uint32_t name_bytes;
  uint32_t files;
  uint32_t bytes;   // per file
  uint32_t piece;   // bytes per gwrite, at most piece_max
  uint32_t flags;   // gopen's
  bool async;       // gclose_async
  unsigned long long* next;
  unsigned long long* failed;
  unsigned long long* close_ns;  // summed over the closing warps
};
constexpr uint32_t piece_max = 4096;

// Word w of file k holds k << 32 | w.
__global__ void writes_kernel(const writes_job* jp) {
  const writes_job& j = *jp;
  const gpu_full_warp w;
  __shared__ uint64_t pieces[4][piece_max / 8];  // 128 threads: 4 warps
  uint64_t* buf = pieces[threadIdx.x / 32];
  for (;;) {
    unsigned long long k = 0;
    if (w.lane() == 0) k = atomicAdd(j.next, 1ull);
    k = __shfl_sync(~0u, k, 0);
    if (k >= j.files) return;
    const gfile f = j.fs.gopen(w, j.names + k * j.name_bytes, j.flags);
    if (!f.ok()) {
      if (w.lane() == 0) atomicAdd(j.failed, 1ull);
      continue;
    }
    for (uint32_t off = 0; off < j.bytes; off += j.piece) {
      const uint32_t n = j.bytes - off < j.piece ? j.bytes - off : j.piece;
      for (uint32_t i = w.lane(); i < n / 8; i += 32) buf[i] = k << 32 | (off / 8 + i);
      __syncwarp();
      if (j.fs.gwrite(w, f, off, buf, n) != int64_t(n) && w.lane() == 0) atomicAdd(j.failed, 1ull);
      __syncwarp();
    }
    const uint64_t t0 = now_ns();
    const int c = j.async ? j.fs.gclose_async(w, f) : j.fs.gclose(w, f);
    if (w.lane() == 0) atomicAdd(j.close_ns, (unsigned long long)(now_ns() - t0));
    if (c != 0 && w.lane() == 0) atomicAdd(j.failed, 1ull);
  }
}

template <class T>
T* device_copy(const void* src, size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  if (src && bytes) check_cuda(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  else check_cuda(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset");
  return static_cast<T*>(p);
}

// The file front to back with O_DIRECT through one io_uring, `depth`
// requests of `block` bytes in flight: what fio's sequential read does.
json uring_stream(const std::string& path, uint64_t size, uint32_t block, unsigned depth) {
  json j;
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  io_uring ring;
  if (fd < 0 || io_uring_queue_init(depth, &ring, 0) != 0) {
    if (fd >= 0) close(fd);
    j["error"] = "cannot open with O_DIRECT or make a ring";
    return j;
  }
  std::vector<void*> bufs(depth);
  for (auto& b : bufs) b = aligned_alloc(4096, block);
  uint64_t next = 0, done = 0;
  unsigned inflight = 0;
  bool failed = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto submit = [&](unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, bufs[slot], block, next);
    io_uring_sqe_set_data64(sqe, slot);
    next += block;
    ++inflight;
  };
  for (unsigned s = 0; s < depth && next < size; ++s) submit(s);
  io_uring_submit(&ring);
  while (inflight) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) {
      failed = true;
      break;
    }
    const unsigned slot = unsigned(io_uring_cqe_get_data64(cqe));
    if (cqe->res <= 0) failed = true;
    else done += uint64_t(cqe->res);
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    if (next < size && !failed) {
      submit(slot);
      io_uring_submit(&ring);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  close(fd);
  for (auto b : bufs) free(b);
  j["block"] = block;
  j["depth"] = depth;
  j["bytes"] = done;
  j["seconds"] = s;
  j["gbps"] = done / s / 1e9;
  if (failed) j["error"] = "a read failed";
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"deepwell file API benchmarks (issue 17)"};
  std::string mode = "stream", dir;
  double gib = 2;
  uint32_t files = 20000, page_kib = 64, blocks = 0, service_threads = file_system_options{}.service_threads, slots = 256;
  uint64_t cache_mib = 1024;
  bool direct_io = false;
  std::string files_direct = "automatic";
  uint32_t write_kib = 64, piece_bytes = 1000;
  app.add_option("--mode", mode, "stream, opens or writes")->check(CLI::IsMember({"stream", "opens", "writes"}));
  app.add_option("--write-kib", write_kib, "writes: each file's size (KiB)");
  app.add_option("--piece-bytes", piece_bytes, "writes: bytes per gwrite (a multiple of 8, at most 4096)");
  app.add_option("--dir", dir, "where the files are made (the file system's root)")->required();
  app.add_option("--gib", gib, "stream: the file's size");
  app.add_option("--files", files, "opens: small files");
  app.add_option("--page-kib", page_kib, "the cache's page size (KiB): each miss is one read of a page");
  app.add_option("--cache-mib", cache_mib, "the GPU cache");
  app.add_option("--service-threads", service_threads, "the file system's host service threads")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--slots", slots, "the file system's request slots (requests in flight from kernels)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--blocks", blocks, "blocks of 128 threads (0: 4 per SM)");
  app.add_flag("--direct-io", direct_io, "stream: read with O_DIRECT");
  app.add_option("--files-direct", files_direct,
                 "large resident files read through the direct tier (file_system_options::files_direct)")
      ->check(CLI::IsMember({"automatic", "on", "off"}));
  CLI11_PARSE(app, argc, argv);

  json j;
  j["mode"] = mode;
  j["env"] = bench::deepwell_env();
  std::filesystem::create_directories(dir);
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  constexpr int threads = 128;
  if (!blocks) blocks = uint32_t(sms) * 4;
  const uint64_t warps = uint64_t(blocks) * threads / 32;

  controller ctl;
  cache_config cc;
  cc.page_size = page_kib * 1024;
  cc.capacity_bytes = cache_mib << 20;
  const uint64_t need = resident_warps(stream_kernel, blocks, threads) * pages_per_warp * uint64_t(cc.page_size) * 5 / 4;
  cc.capacity_bytes = std::max<uint64_t>(cc.capacity_bytes, need);
  auto cache = make_gpu_page_cache(ctl, cc);
  file_system_options fo;
  fo.root = dir;
  fo.read_only = mode != "writes";
  fo.direct_io = direct_io;
  fo.slots = slots;
  fo.service_threads = service_threads;
  using tier = file_system_options::direct_tier;
  fo.files_direct = files_direct == "on" ? tier::on : files_direct == "off" ? tier::off : tier::automatic;
  j["files_direct"] = files_direct;
  auto fs = make_gpu_file_system(cache, fo);
  j["page_bytes"] = cc.page_size;
  j["cache_bytes"] = cc.capacity_bytes;
  j["warps"] = warps;
  j["h2d_gbps"] = measure_h2d_gbps();
  // 0 wrong, 1 failed, 2 the next file; 3-5 times (writes: the closes';
  // opens: gopen's, gread's, gclose's).
  unsigned long long* counters = device_copy<unsigned long long>(nullptr, 6 * 8);
  unsigned long long got[6] = {};
  int failures = 0;

  if (mode == "stream") {
    const uint64_t size = uint64_t(gib * (1ull << 30)) / chunk_bytes * chunk_bytes;
    const std::string name = "stream.bin", path = dir + "/" + name;
    bench::ensure_pattern_file(path, size);  // word i holds i
    if (!direct_io) bench::read_through(path, size);  // warm: in the page cache
    check_launch(*cache, stream_kernel, blocks, threads);
    stream_job sj;
    sj.fs = fs->ref();
    sj.size = size;
    check_cuda(cudaMalloc(&sj.scratch, warps * chunk_bytes), "cudaMalloc of the stream's scratch");
    sj.wrong = counters;
    sj.failed = counters + 1;
    auto* dj = device_copy<stream_job>(&sj, sizeof sj);
    auto* dpath = device_copy<char>(name.c_str(), name.size() + 1);
    int* result = device_copy<int>(nullptr, sizeof(int));
    // Each kernel waited for: the file service's copies must not queue
    // behind a kernel that waits on them (grep_gpu.cu says why).
    bench::timer topen;
    topen.start();
    open_file<<<1, 32>>>(dj, dpath);
    check_cuda(cudaDeviceSynchronize(), "gopen");
    const double open_s = topen.stop();  // with the direct tier: mapping and registering the file
    bench::timer t;
    t.start();
    stream_kernel<<<blocks, threads>>>(dj);
    const double s = t.stop();
    check_cuda(cudaDeviceSynchronize(), "the stream kernel");
    close_file<<<1, 32>>>(dj, result);
    check_cuda(cudaDeviceSynchronize(), "gclose");
    int closed = 0;
    gfile f;
    cudaMemcpy(&f, reinterpret_cast<char*>(dj) + offsetof(stream_job, file), sizeof f, cudaMemcpyDeviceToHost);
    cudaMemcpy(&closed, result, sizeof closed, cudaMemcpyDeviceToHost);
    cudaMemcpy(got, counters, sizeof got, cudaMemcpyDeviceToHost);
    const cache_stats st = cache->stats();
    j["file_bytes"] = size;
    j["direct_io"] = direct_io;
    j["direct_opens"] = fs->stats().direct_opens;
    j["direct_tier_opens"] = fs->stats().direct_tier_opens;
    j["direct_fills"] = st.direct_fills;
    j["open_seconds"] = open_s;
    j["seconds"] = s;
    j["gbps"] = size / s / 1e9;
    j["misses"] = st.misses;
    j["wrong_words"] = got[0];
    j["failed_reads"] = got[1];
    j["open_errno"] = f.err;
    j["close_result"] = closed;
    failures = got[0] || got[1] || !f.ok() || closed;
    // Through the direct tier (the default for a resident file) or through
    // the controller (--files-direct off, or O_DIRECT): keys apart.
    const bool tiered = fs->stats().direct_tier_opens > 0;
    const double vs_h2d = double(j["gbps"]) / double(j["h2d_gbps"]);
    if (direct_io)
      ;  // cold: against the io_uring loop below
    else if (tiered)
      j["ratios"]["gread_stream_vs_h2d"] = vs_h2d;
    else
      j["ratios"]["gread_stream_controller_vs_h2d"] = vs_h2d;
    if (tiered) j["ratios"]["gread_stream_with_open_vs_h2d"] = size / (s + open_s) / 1e9 / double(j["h2d_gbps"]);
    if (direct_io) {
      const json fio = uring_stream(path, size, 1u << 20, 32);
      j["baselines"]["uring_stream_odirect"] = fio;
      if (fio.contains("gbps") && !fio.contains("error"))
        j["ratios"]["gread_stream_odirect_vs_fio"] = double(j["gbps"]) / double(fio["gbps"]);
    }
    cudaFree(sj.scratch);
    cudaFree(dj);
    cudaFree(dpath);
    cudaFree(result);
  } else if (mode == "writes") {
    if (piece_bytes == 0 || piece_bytes % 8 || piece_bytes > piece_max)
      throw error("--piece-bytes must be a multiple of 8 from 8 to 4096");
    const uint32_t name_bytes = 48, bytes = write_kib * 1024;
    check_launch(*cache, writes_kernel, blocks, threads);
    writes_job wj;
    wj.fs = fs->ref();
    wj.name_bytes = name_bytes;
    wj.files = files;
    wj.bytes = bytes;
    wj.piece = piece_bytes;
    wj.next = counters + 2;
    wj.failed = counters + 1;
    wj.close_ns = counters + 3;
    // Every word of every file of a pass, read back on the host.
    auto check_files = [&](const std::string& sub) -> uint64_t {
      uint64_t bad = 0;
      std::vector<uint64_t> words(bytes / 8);
      for (uint32_t k = 0; k < files; ++k) {
        FILE* in = std::fopen((dir + "/" + sub + "/" + std::to_string(k)).c_str(), "rb");
        struct stat sb {};
        if (!in || fstat(fileno(in), &sb) != 0 || uint64_t(sb.st_size) != bytes ||
            std::fread(words.data(), 8, words.size(), in) != words.size()) {
          ++bad;
        } else {
          for (uint64_t i = 0; i < words.size(); ++i) bad += words[i] != (uint64_t(k) << 32 | i);
        }
        if (in) std::fclose(in);
      }
      return bad;
    };
    struct pass {
      const char* name;
      uint32_t flags;
      bool async;
    };
    const pass passes[] = {{"gclose", g_wronly | g_creat | g_trunc, false},
                           {"gclose_async", g_wronly | g_creat | g_trunc, true},
                           {"write_once", g_wronly | g_gwronce, true}};
    for (const pass& ps : passes) {
      // Each pass writes new files in a directory of its own, so that no
      // pass pays for truncating another's.
      const std::string sub = std::string("written-") + ps.name;
      std::filesystem::remove_all(dir + "/" + sub);
      std::filesystem::create_directories(dir + "/" + sub);
      std::vector<char> names(uint64_t(files) * name_bytes, 0);
      for (uint32_t k = 0; k < files; ++k)
        std::snprintf(&names[uint64_t(k) * name_bytes], name_bytes, "%s/%u", sub.c_str(), k);
      wj.names = device_copy<char>(names.data(), names.size());
      wj.flags = ps.flags;
      wj.async = ps.async;
      check_cuda(cudaMemset(counters, 0, sizeof got), "cudaMemset");
      auto* dj = device_copy<writes_job>(&wj, sizeof wj);
      const uint64_t reads_before = cache->stats().bytes_read;
      bench::timer t;
      t.start();
      writes_kernel<<<blocks, threads>>>(dj);
      const double kernel_s = t.stop();
      check_cuda(cudaDeviceSynchronize(), "the writes kernel");
      const auto t0 = std::chrono::steady_clock::now();
      fs->sync();  // the async closes finished, on the host
      const double landed_s = kernel_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      cudaMemcpy(got, counters, sizeof got, cudaMemcpyDeviceToHost);
      const uint64_t wrong = check_files(sub);
      j["passes"][ps.name] = {{"kernel_seconds", kernel_s},
                              {"landed_seconds", landed_s},
                              {"close_us_mean", files ? double(got[3]) / 1e3 / files : 0.0},
                              {"failed", got[1]},
                              {"wrong_words_or_files", wrong},
                              {"bytes_read_into_cache", cache->stats().bytes_read - reads_before}};
      failures |= got[1] || wrong;
      cudaFree(dj);
      cudaFree(const_cast<char*>(wj.names));
    }
    const json& ps = j["passes"];
    j["files"] = files;
    j["file_bytes"] = bytes;
    j["piece_bytes"] = piece_bytes;
    j["background_closes"] = fs->stats().background_closes;
    j["ratios"]["gclose_async_vs_gclose"] =
        double(ps["gclose_async"]["close_us_mean"]) / double(ps["gclose"]["close_us_mean"]);
    j["ratios"]["gclose_async_kernel_vs_gclose"] =
        double(ps["gclose_async"]["kernel_seconds"]) / double(ps["gclose"]["kernel_seconds"]);
    j["ratios"]["write_once_vs_plain"] =
        double(ps["write_once"]["landed_seconds"]) / double(ps["gclose_async"]["landed_seconds"]);
  } else {  // opens
    const uint32_t name_bytes = 32;
    std::vector<char> names(uint64_t(files) * name_bytes, 0);
    std::filesystem::create_directories(dir + "/small");
    for (uint32_t k = 0; k < files; ++k) {
      const std::string rel = "small/" + std::to_string(k);
      std::snprintf(&names[uint64_t(k) * name_bytes], name_bytes, "%s", rel.c_str());
      const std::string p = dir + "/" + rel;
      struct stat sb {};
      if (stat(p.c_str(), &sb) == 0 && sb.st_size == 4096) continue;
      std::vector<uint64_t> body(512, 0);
      body[0] = k;
      FILE* out = std::fopen(p.c_str(), "wb");
      if (!out || std::fwrite(body.data(), 8, 512, out) != 512) throw error("cannot write " + p);
      std::fclose(out);
    }
    check_launch(*cache, opens_kernel, blocks, threads);
    opens_job oj;
    oj.fs = fs->ref();
    oj.names = device_copy<char>(names.data(), names.size());
    oj.name_bytes = name_bytes;
    oj.files = files;
    oj.next = counters + 2;
    oj.wrong = counters;
    oj.failed = counters + 1;
    oj.phase_ns = counters + 3;
    auto* dj = device_copy<opens_job>(&oj, sizeof oj);
    const file_system_stats before = fs->stats();
    bench::timer t;
    t.start();
    opens_kernel<<<blocks, threads>>>(dj);
    const double s = t.stop();
    check_cuda(cudaDeviceSynchronize(), "the opens kernel");
    cudaMemcpy(got, counters, sizeof got, cudaMemcpyDeviceToHost);
    j["files"] = files;
    j["seconds"] = s;
    j["wrong"] = got[0];
    j["failed"] = got[1];
    const file_system_stats after = fs->stats();
    // Where a file's time goes: each call's mean latency in a warp, and how
    // busy the host's service threads were (1: always answering).
    j["gopen_us_mean"] = double(got[3]) / 1e3 / files;
    j["gread_us_mean"] = double(got[4]) / 1e3 / files;
    j["gclose_us_mean"] = double(got[5]) / 1e3 / files;
    j["file_system"] = {{"requests", after.requests - before.requests},
                        {"files_opened", after.files_opened - before.files_opened},
                        {"service_threads", fo.service_threads},
                        {"slots", fo.slots},
                        {"lock_wait_share", after.service_ns == before.service_ns ? 0.0 :
                             double(after.lock_wait_ns - before.lock_wait_ns) / double(after.service_ns - before.service_ns)},
                        {"service_busy", double(after.service_ns - before.service_ns) / 1e9 / s /
                                             fo.service_threads}};
    if (after.service_ns > before.service_ns) {
      const double busy = double(after.service_ns - before.service_ns);
      j["file_system"]["open_calls_share"] = double(after.open_calls_ns - before.open_calls_ns) / busy;
      j["file_system"]["locked_share"] = double(after.locked_ns - before.locked_ns) / busy;
      j["file_system"]["after_lock_share"] = double(after.after_lock_ns - before.after_lock_ns) / busy;
      j["file_system"]["service_us_per_request"] =
          busy / 1e3 / double(std::max<uint64_t>(1, after.requests - before.requests));
    }
    failures = got[0] || got[1];
    j["ratios"]["gopen_gclose_per_s"] = files / s;
    cudaFree(const_cast<char*>(oj.names));
    cudaFree(dj);
  }
  cudaFree(counters);
  if (auto e = cache->last_error(); !e.ok()) j["last_error"] = describe(e);
  std::printf("%s\n", j.dump().c_str());
  return failures ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "files_bench: %s\n", e.what());
  return 2;
}
