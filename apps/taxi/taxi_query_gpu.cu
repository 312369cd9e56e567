// The taxi queries with GPU warps as clients (taxi_run.hpp): one kernel,
// every warp a taxi_query_worker over a grid-stride share of the row groups.
#include <cuda_runtime.h>

#include <algorithm>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "taxi/taxi_run.hpp"

namespace deepwell::table {
namespace {

struct taxi_cols {
  array_ref<int32_t> c[taxi_queries];
};

// Capped at 64 registers (4 blocks of 256 an SM, 32 warps): the scan is a
// lookup a page and then loads, so resident warps set its rate over pages
// already in HBM; uncapped it took 255 registers (8 warps an SM) and spilled
// as much. The lookup's rare paths (acquire_rest) take the extra spills.
__global__ void __launch_bounds__(256, 4) taxi_query_kernel(taxi_cols cols, int q, taxi_query_result* out, bool sparse) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  taxi_query_worker(gpu_full_warp{}, cols.c, q, warp, warps, out, sparse);
}

}  // namespace

taxi_query_report run_taxi_query_gpu(const column_file& f, const taxi_query_options& o) {
  taxi_query_report rep;
  rep.route = detail::route_taxi_query(f, o, true);
  const detail::taxi_columns t = detail::open_taxi_columns(
      detail::taxi_link(o), f, o,
      [](std::shared_ptr<controller_link> l, const cache_config& cc) { return make_gpu_page_cache(std::move(l), cc); });
  taxi_cols cols{};
  for (size_t i = 0; i < t.arrays.size(); ++i) cols.c[i] = t.arrays[i].ref();
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  // By default as many blocks as the cache lets pin their pages at once
  // (pages_per_warp a warp), up to 4 a multiprocessor; an explicit count of
  // warps is checked as given.
  const unsigned fit = std::max(1u, t.cache->slots() / (pages_per_warp * 8));
  const unsigned blocks = o.workers ? (o.workers + 7) / 8 : std::min(unsigned(sms) * 4, fit);
  check_launch(*t.cache, taxi_query_kernel, blocks, 256);
  taxi_query_result* d = nullptr;
  check_cuda(cudaMalloc(&d, sizeof *d), "cudaMalloc");
  check_cuda(cudaMemset(d, 0, sizeof *d), "cudaMemset");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  // One run: its seconds and answer.
  auto run = [&](taxi_query_result& r) {
    check_cuda(cudaMemset(d, 0, sizeof *d), "cudaMemset");
    cudaEventRecord(e0);
    taxi_query_kernel<<<blocks, 256>>>(cols, o.query, d, o.sparse_gather);
    cudaEventRecord(e1);
    const cudaError_t ke = cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    check_cuda(ke, "the taxi query kernel");
    check_cuda(cudaMemcpy(&r, d, sizeof *d, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return ms / 1e3;
  };
  t.cache->reset_stats();
  rep.run_seconds = run(rep.result);
  rep.seconds = rep.route.seconds + rep.run_seconds;
  // The report's counters are the first run's; the warm runs find the
  // pages it brought in.
  const cache_stats first = t.cache->stats();
  for (unsigned i = 0; i < o.warm_runs; ++i) {
    taxi_query_result r{};
    const double s = run(r);
    if (rep.warm_seconds == 0 || s < rep.warm_seconds) rep.warm_seconds = s;
    rep.warm_agrees = rep.warm_agrees && r.selected == rep.result.selected && r.distance == rep.result.distance &&
                      r.net == rep.result.net && r.failed == 0;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(d);
  detail::finish_taxi_report(rep, f, t, o, &first);
  return rep;
}

}  // namespace deepwell::table
