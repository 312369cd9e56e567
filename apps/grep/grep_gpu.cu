// `deepwell grep` on the GPU (files/grep_run.hpp): every warp a worker of
// grep_worker, the output file opened and closed by a warp of its own
// (the file API's calls run on the device).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "deepwell/common/error.hpp"
#include "deepwell/files/file_system.hpp"
#include "grep/grep_run.hpp"
#include "deepwell/cache/gpu_launch.hpp"

namespace deepwell {
namespace {

__global__ void open_output(grep_job* j, const char* name) {
  // Write-once: lines go to disjoint offsets (a cursor), and their pages
  // are never read first.
  const gfile f = j->out.gopen(gpu_full_warp{}, name, g_wronly | g_gwronce);
  if (threadIdx.x == 0) j->out_file = f;
}

__global__ void close_output(grep_job* j, int* result, bool fsync) {
  int r = fsync ? j->out.gfsync(gpu_full_warp{}, j->out_file) : 0;
  const int closed = j->out.gclose(gpu_full_warp{}, j->out_file);
  if (!r) r = closed;
  if (threadIdx.x == 0) *result = r;
}

// The file API's code is large: left alone the compiler gives the kernel
// 255 registers a thread, so only two 128-thread blocks fit an SM and a
// launch of four blocks an SM ran in two waves (found 2026-11-27). The
// launch bounds keep `MinBlocks` blocks of 128 threads resident.
template <int MinBlocks>
__global__ void __launch_bounds__(128, MinBlocks) grep_kernel(const grep_job* j) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  grep_worker(gpu_full_warp{}, *j, warp);
}

template <class T>
T* to_device(const void* src, size_t bytes, std::vector<void*>& owned) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc for grep");
  owned.push_back(p);
  if (bytes && src) check_cuda(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy for grep");
  else if (bytes) check_cuda(cudaMemset(p, 0, bytes), "cudaMemset for grep");
  return static_cast<T*>(p);
}

}  // namespace

grep_report run_grep_gpu(const grep_options& o, const grep_dictionary& d, const std::vector<std::string>& files) {
  const auto entry = std::chrono::steady_clock::now();
  grep_report rep;
  rep.files = files.size();
  // Before the context exists (the controller makes it). Where it already
  // does, CUDA keeps its flags: that is only slower, not wrong.
  if (cudaSetDeviceFlags(o.spin_wait ? cudaDeviceScheduleSpin : cudaDeviceScheduleBlockingSync) != cudaSuccess)
    (void)cudaGetLastError();
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  constexpr int threads = 128;
  const uint32_t per_sm = o.blocks_per_sm ? o.blocks_per_sm : 4;
  if (per_sm != 4 && per_sm != 8) throw error("grep: blocks per SM must be 4 or 8, not " + std::to_string(per_sm));
  auto* kernel = per_sm == 8 ? grep_kernel<8> : grep_kernel<4>;
  const uint32_t blocks = o.workers ? (o.workers + 3) / 4 : uint32_t(sms) * per_sm;
  const uint64_t warps = uint64_t(blocks) * (threads / 32);

  cache_config cc = grep_cache_config(o);
  rep.workers = warps;
  rep.resident_workers = resident_warps(kernel, blocks, threads);
  // Every resident warp may pin a page per lane (page_cache::check_capacity).
  const uint64_t need = rep.resident_workers * pages_per_warp * cc.page_size * 5 / 4;
  cc.capacity_bytes = std::max<uint64_t>(cc.capacity_bytes, need);
  auto cache = make_gpu_page_cache(grep_link(o), cc);
  const file_system_options in_opts = grep_input_options(o, 256, warps);
  auto in = make_gpu_file_system(cache, in_opts);
  auto out = make_gpu_file_system(cache, grep_output_options(o));
  check_launch(*cache, kernel, blocks, threads);

  std::vector<void*> owned;
  const std::vector<char> paths = grep_path_table(files);
  grep_job j;
  j.in = in->ref();
  j.out = out->ref();
  j.dict = {to_device<uint8_t>(d.blob.data(), d.blob.size(), owned), to_device<uint32_t>(d.offs.data(), d.offs.size() * 4, owned),
            to_device<uint32_t>(d.table.data(), d.table.size() * 4, owned), uint32_t(d.table.size() - 1), d.max_len};
  j.paths = to_device<char>(paths.data(), paths.size(), owned);
  j.npaths = uint32_t(files.size());
  j.piece_bytes = grep_piece_size(o);
  const unsigned long long zero4[4] = {};
  auto* cursors = to_device<unsigned long long>(zero4, sizeof zero4, owned);
  j.next_path = cursors;
  j.out_cursor = cursors + 1;
  j.pieces_made = cursors + 2;
  j.pieces_taken = cursors + 3;
  j.pieces = to_device<grep_piece>(nullptr, sizeof(grep_piece) * grep_max_pieces, owned);
  check_cuda(cudaMalloc(&j.scratch, warps * sizeof(grep_scratch)), "cudaMalloc of grep scratch");
  owned.push_back(j.scratch);
  check_cuda(cudaMemset(j.scratch, 0, warps * sizeof(grep_scratch)), "cudaMemset");
  const grep_counters zc{};
  j.counters = to_device<grep_counters>(&zc, sizeof zc, owned);
  auto* dj = to_device<grep_job>(&j, sizeof j, owned);
  auto* name = to_device<char>(o.out_name.c_str(), o.out_name.size() + 1, owned);
  auto* result = to_device<int>(nullptr, sizeof(int), owned);

  // Nothing is queued behind a kernel that waits on the file service: the
  // service's copies (a closed file's table entry) run on a stream of their
  // own, and work queued behind the running kernel on the same hardware
  // queue could hold them back until the kernel's calls time out (seen on
  // an H100: every gclose took the full deadline when close_output and an
  // event were queued behind grep_kernel). So each kernel is waited for.
  // Timed as the CPU run and the vanilla program are: from the output's
  // open to its close (the lines written back to the host's file).
  const auto t0 = std::chrono::steady_clock::now();
  open_output<<<1, 32>>>(dj, name);
  check_cuda(cudaDeviceSynchronize(), "opening the grep output");
  const auto t1 = std::chrono::steady_clock::now();
  grep_host_watch host(o);
  kernel<<<blocks, threads>>>(dj);
  check_cuda(cudaDeviceSynchronize(), "the grep kernel");
  const auto t2 = std::chrono::steady_clock::now();
  host.report(rep);  // diagnostics: left out of the times
  const auto t2r = std::chrono::steady_clock::now();
  // Durable: through the file API under a server (whose files these are),
  // else the host's own fdatasync once closed, as the vanilla program's.
  close_output<<<1, 32>>>(dj, result, o.fsync && !o.server.empty());
  check_cuda(cudaDeviceSynchronize(), "closing the grep output");
  int close_result = 0;
  check_cuda(cudaMemcpy(&close_result, result, sizeof close_result, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (!close_result && o.fsync && o.server.empty()) make_grep_output_durable(o);
  const auto t3 = std::chrono::steady_clock::now();
  using secs = std::chrono::duration<double>;
  rep.setup_seconds = secs(t0 - entry).count();
  rep.report_seconds = secs(t2r - t2).count();
  rep.seconds = secs(t3 - t0).count() - rep.report_seconds;
  rep.open_seconds = secs(t1 - t0).count();
  rep.search_seconds = secs(t2 - t1).count();
  rep.close_seconds = secs(t3 - t2r).count();
  int closed = 0;
  gfile of;
  check_cuda(cudaMemcpy(&of, reinterpret_cast<char*>(dj) + offsetof(grep_job, out_file), sizeof of, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_cuda(cudaMemcpy(&closed, result, sizeof closed, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_cuda(cudaMemcpy(&rep.counters, j.counters, sizeof rep.counters, cudaMemcpyDeviceToHost), "cudaMemcpy");
  unsigned long long cur[2];
  check_cuda(cudaMemcpy(cur, cursors, sizeof cur, cudaMemcpyDeviceToHost), "cudaMemcpy");
  rep.output_bytes = cur[1];
  rep.input = in->stats();
  rep.service_threads = in_opts.service_threads;
  for (void* p : owned) cudaFree(p);
  if (!of.ok()) throw error("grep: cannot open " + o.out_dir + "/" + o.out_name + " for writing: " + std::strerror(of.err));
  if (closed) throw error("grep: closing the output failed: " + std::string(std::strerror(-closed)));
  return rep;
}

}  // namespace deepwell
