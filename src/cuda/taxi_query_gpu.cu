// The taxi queries with GPU warps as clients (taxi_run.hpp): one kernel,
// every warp a taxi_query_worker over a grid-stride share of the row groups.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "deepwell/controller.hpp"
#include "deepwell/error.hpp"
#include "deepwell/gpu_client.hpp"
#include "deepwell/gpu_launch.hpp"
#include "deepwell/table/taxi_run.hpp"

namespace deepwell::table {
namespace {

struct taxi_cols {
  array_ref<int32_t> c[taxi_queries];
};

__global__ void __launch_bounds__(256) taxi_query_kernel(taxi_cols cols, int q, taxi_query_result* out, bool sparse) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  taxi_query_worker(gpu_full_warp{}, cols.c, q, warp, warps, out, sparse);
}

}  // namespace

taxi_query_report run_taxi_query_gpu(const column_file& f, const taxi_query_options& o) {
  controller_config ctl_cfg;
  if (o.pollers) ctl_cfg.pollers = o.pollers;
  controller ctl(ctl_cfg);
  const std::vector<uint32_t> ns = detail::add_taxi_namespaces(ctl, f, o.query, o.odirect);
  const auto t_setup = std::chrono::steady_clock::now();
  cache_config cc;
  if (o.cache_bytes) cc.capacity_bytes = o.cache_bytes;
  if (o.page_size) cc.page_size = o.page_size;
  // The direct tier only where every page of a column is in the page cache
  // (a column on storage is read through the controller either way).
  cc.direct_tier = o.direct_tier && !o.odirect;
  cc.direct_files = cache_config::file_tier::resident;
  auto cache = make_gpu_page_cache(ctl, cc);
  std::vector<array<int32_t>> arrays;
  taxi_cols cols{};
  for (uint32_t n : ns) arrays.emplace_back(cache, n);
  for (size_t i = 0; i < arrays.size(); ++i) cols.c[i] = arrays[i].ref();
  const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_setup).count();
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  // By default as many blocks as the cache lets pin their pages at once
  // (pages_per_warp a warp), up to 4 a multiprocessor; an explicit count of
  // warps is checked as given.
  const unsigned fit = std::max(1u, cache->slots() / (pages_per_warp * 8));
  const unsigned blocks = o.workers ? (o.workers + 7) / 8 : std::min(unsigned(sms) * 4, fit);
  check_launch(*cache, taxi_query_kernel, blocks, 256);
  taxi_query_result* d = nullptr;
  check_cuda(cudaMalloc(&d, sizeof *d), "cudaMalloc");
  check_cuda(cudaMemset(d, 0, sizeof *d), "cudaMemset");
  taxi_query_report rep;
  rep.rows = f.rows();
  rep.setup_seconds = setup;
  for (uint32_t i = 0; i < uint32_t(arrays.size()); ++i) rep.direct_columns += cache->dataset(arrays[i].ref().dataset).direct != nullptr;
  cache->reset_stats();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  taxi_query_kernel<<<blocks, 256>>>(cols, o.query, d, o.sparse_gather);
  cudaEventRecord(e1);
  const cudaError_t ke = cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  check_cuda(ke, "the taxi query kernel");
  rep.seconds = ms / 1e3;
  check_cuda(cudaMemcpy(&rep.result, d, sizeof *d, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d);
  const cache_stats s = cache->stats();
  rep.misses = s.misses;
  rep.hits = s.hits;
  if (o.sparse_gather)
    for (size_t c = 1; c < arrays.size(); ++c)
      if (cache->dataset(arrays[c].ref().dataset).direct) rep.sparse_reads += rep.result.selected;
  rep.bytes_read = s.misses * cache->page_size() + rep.sparse_reads * 32;
  rep.bytes_needed = detail::taxi_bytes_needed(rep.result, rep.rows, o.query);
  rep.bytes_tiling = rep.rows * 4 * uint64_t(o.query + 1);
  if (auto e = cache->last_error(); !e.ok() && rep.result.failed == 0) rep.result.failed = 1;
  return rep;
}

}  // namespace deepwell::table
