// Issue 18's GPU baselines for the taxi queries, on one column file, in
// one run (bench/probes/taxi-bench adds DuckDB and computes the ratios):
//   deepwell  the queries through deepwell's cache (run_taxi_query_gpu):
//             the scan column in full, the others where a long trip lies;
//             columns in the page cache through the direct tier (setup,
//             registering their mappings, reported apart), the selected
//             rows' values read alone from host memory
//   deepwell-pages  the same bringing those rows' pages into the cache
//   deepwell-queued  the same with every miss served by the controller's
//             pollers (--queued-pollers), as for data on storage
//   tiling    the RAPIDS way: every column the query needs moved to the GPU
//             in row groups (host threads pread into pinned double buffers,
//             cudaMemcpyAsync), then the same kernel over each group
//   floor     the same kernel over the columns already in GPU memory
//   zerocopy  the same kernel reading the file's pages in place through a
//             registered mapping (pinned host memory, EMOGI's way)
// Every method's answers are compared; one JSON line per (query, method).
//   taxi_bench FILE [--queries 0,5] [--tile-rows N] [--cache-mib M] [--queued-pollers P]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "taxi/taxi_run.hpp"

using namespace deepwell;
using namespace deepwell::table;
using json = nlohmann::json;

namespace {

struct plain_cols {
  plain_column c[taxi_queries];
};

__global__ void __launch_bounds__(256) plain_query_kernel(plain_cols cols, int q, taxi_query_result* out) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  taxi_query_worker(gpu_full_warp{}, cols.c, q, warp, warps, out);
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool same(const taxi_query_result& a, const taxi_query_result& b, int q) {
  return a.selected == b.selected && a.distance == b.distance && (q == 0 || a.net == b.net) && a.failed == 0 &&
         b.failed == 0;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"taxi queries: deepwell against tiling, the floor and zero-copy"};
  std::string path;
  std::vector<int> queries{0, 1, 2, 3, 4, 5};
  uint64_t tile_rows = 16ull << 20, cache_mib = 0;
  unsigned threads = 8;
  bool skip_zero_copy = false;
  app.add_option("file", path, "column file (deepwell table gen)")->required();
  app.add_option("--queries", queries, "query numbers")->delimiter(',');
  app.add_option("--tile-rows", tile_rows, "rows per tile (tiling)");
  app.add_option("--read-threads", threads, "host threads reading tiles");
  app.add_option("--cache-mib", cache_mib, "deepwell's cache (0: the default)");
  app.add_flag("--no-zero-copy", skip_zero_copy, "skip the zero-copy method");
  unsigned queued_pollers = 8;
  app.add_option("--queued-pollers", queued_pollers, "controller pollers of the deepwell-queued method");
  CLI11_PARSE(app, argc, argv);

  const column_file f = column_file::open(path);
  const uint64_t rows = f.rows();
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  const unsigned blocks = unsigned(sms) * 4;
  taxi_query_result* d_res = nullptr;
  check_cuda(cudaMalloc(&d_res, sizeof *d_res), "cudaMalloc");
  auto run_plain = [&](const plain_cols& cols, int q, cudaStream_t s) {
    plain_query_kernel<<<blocks, 256, 0, s>>>(cols, q, d_res);
  };
  auto result = [&] {
    taxi_query_result r{};
    check_cuda(cudaMemcpy(&r, d_res, sizeof r, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return r;
  };
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  bench::read_through(path, f.columns().back().offset + f.columns().back().bytes);  // a warm page cache for all

  // The floor: every column the last query needs, in GPU memory.
  const int qmax = *std::max_element(queries.begin(), queries.end());
  std::vector<int32_t*> dcol(taxi_queries, nullptr);
  {
    std::vector<int32_t> host(rows);
    for (int c = 0; c <= qmax; ++c) {
      const column_info& ci = f.column(taxi_query_columns[c], column_type::decimal32);
      if (pread(fd, host.data(), ci.bytes, off_t(ci.offset)) != ssize_t(ci.bytes)) throw error("short read of " + ci.name);
      check_cuda(cudaMalloc(&dcol[c], ci.bytes), "cudaMalloc (floor)");
      check_cuda(cudaMemcpy(dcol[c], host.data(), ci.bytes, cudaMemcpyHostToDevice), "cudaMemcpy (floor)");
    }
  }
  // Zero-copy: the file mapped and registered (pinned) once.
  std::unique_ptr<bench::zero_copy_view> zc;
  if (!skip_zero_copy) zc = std::make_unique<bench::zero_copy_view>(path, f.columns().back().offset + f.columns().back().bytes);

  // Tiling: two pinned host buffers and two device tiles per column.
  std::vector<int32_t*> hbuf[2], dbuf[2];
  for (int b = 0; b < 2; ++b) {
    hbuf[b].assign(taxi_queries, nullptr);
    dbuf[b].assign(taxi_queries, nullptr);
    for (int c = 0; c <= qmax; ++c) {
      check_cuda(cudaMallocHost(&hbuf[b][c], tile_rows * 4), "cudaMallocHost (tiles)");
      check_cuda(cudaMalloc(&dbuf[b][c], tile_rows * 4), "cudaMalloc (tiles)");
    }
  }
  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t tile_done[2];
  for (auto& e : tile_done) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");

  for (int q : queries) {
    json base = {{"query", q}, {"rows", rows}, {"file", path}};
    auto emit = [&](const char* method, double secs, const taxi_query_result& r, uint64_t bytes_moved, json extra = {}) {
      json j = base;
      j["method"] = method;
      j["seconds"] = secs;
      j["selected"] = r.selected;
      j["distance"] = r.distance;
      j["net"] = r.net;
      j["failed"] = r.failed;
      j["bytes_moved"] = bytes_moved;
      for (auto& [k, v] : extra.items()) j[k] = v;
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    };
    // deepwell's methods (warm page cache; its cache empty at the start of each run).
    auto run_deepwell = [&](const char* method, const taxi_query_options& opts, json extra) {
      const taxi_query_report r = run_taxi_query_gpu(f, opts);
      extra["bytes_needed"] = r.bytes_needed;
      extra["io_amplification"] = r.io_amplification();
      extra["misses"] = r.misses;
      extra["setup_seconds"] = r.setup_seconds;
      extra["setup_cache_seconds"] = r.setup_cache_seconds;
      extra["direct_columns"] = r.direct_columns;
      extra["sparse_reads"] = r.sparse_reads;
      // Each column's route (taxi_route.hpp) and why; warm: resident.
      json routes = json::array();
      for (const auto& c : r.route.columns) routes.push_back({{"column", c.column}, {"route", route_name(c.route)}, {"why", c.why}});
      extra["routes"] = routes;
      extra["route_seconds"] = r.route.seconds;
      extra["run_seconds"] = r.run_seconds;
      emit(method, r.seconds, r.result, r.bytes_read, extra);
      return r;
    };
    taxi_query_options o;
    o.query = q;
    if (cache_mib) o.cache.cache_bytes = cache_mib << 20;
    // Columns in the page cache through the direct tier, the selected values read alone.
    const taxi_query_report dw = run_deepwell("deepwell", o, {});
    // The same over a cache that holds the scan column, run again with its
    // pages in HBM: what the cache costs over data already in GPU memory.
    taxi_query_options oh = o;
    oh.cache.cache_bytes = std::max<uint64_t>(o.cache.cache_bytes, rows * 4 + (256ull << 20));
    oh.warm_runs = 3;
    const taxi_query_report dh = run_taxi_query_gpu(f, oh);
    taxi_query_result dh_r = dh.result;
    if (!dh.warm_agrees) dh_r.failed = 1;  // a warm run's answer differed from the first's
    emit("deepwell-hbm", dh.warm_seconds, dh_r, 0,
         {{"first_seconds", dh.seconds}, {"cache_bytes", oh.cache.cache_bytes}, {"warm_runs", oh.warm_runs},
          {"warm_agrees", dh.warm_agrees}});
    // The same bringing the selected rows' pages into the cache.
    taxi_query_options op = o;
    op.sparse_gather = false;
    const taxi_query_report dp = run_deepwell("deepwell-pages", op, {});
    // The same with every miss through the controller (as for data on
    // storage, here served from the page cache by its pollers).
    taxi_query_options oq = o;
    oq.direct_tier = false;
    oq.cache.pollers = queued_pollers;
    const taxi_query_report dq = run_deepwell("deepwell-queued", oq, {{"pollers", queued_pollers}});
    // The floor.
    plain_cols fc{};
    for (int c = 0; c <= q; ++c) fc.c[c] = {dcol[c], rows};
    cudaMemset(d_res, 0, sizeof *d_res);
    bench::timer t;
    t.start();
    run_plain(fc, q, 0);
    const double floor_s = t.stop();
    const taxi_query_result floor_r = result();
    emit("floor", floor_s, floor_r, 0);
    // Zero-copy.
    if (zc) {
      plain_cols zcc{};
      for (int c = 0; c <= q; ++c)
        zcc.c[c] = {reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(zc->device()) +
                                                     f.column(taxi_query_columns[c]).offset),
                    rows};
      cudaMemset(d_res, 0, sizeof *d_res);
      t.start();
      run_plain(zcc, q, 0);
      const double s = t.stop();
      emit("zerocopy", s, result(), 0);
    }
    // Tiling: the reader threads fill tile i + 1's pinned buffers while the
    // GPU copies and scans tile i.
    cudaMemset(d_res, 0, sizeof *d_res);
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t tiles = (rows + tile_rows - 1) / tile_rows;
    auto read_tile = [&](uint64_t i, int b) {
      const uint64_t r0 = i * tile_rows, n = std::min(tile_rows, rows - r0);
      // Pieces of 4 MiB over the threads, every column.
      const uint64_t piece = 1 << 20;
      const uint64_t pieces = (n + piece - 1) / piece;
      std::atomic<uint64_t> next{0};
      std::vector<std::thread> ts;
      for (unsigned k = 0; k < threads; ++k)
        ts.emplace_back([&] {
          for (uint64_t p; (p = next.fetch_add(1)) < pieces * uint64_t(q + 1);) {
            const int c = int(p / pieces);
            const uint64_t a = (p % pieces) * piece, m = std::min(piece, n - a);
            const column_info& ci = f.column(taxi_query_columns[c]);
            if (pread(fd, hbuf[b][c] + a, m * 4, off_t(ci.offset + (r0 + a) * 4)) != ssize_t(m * 4))
              std::fprintf(stderr, "taxi_bench: short read\n");
          }
        });
      for (auto& th : ts) th.join();
    };
    read_tile(0, 0);
    for (uint64_t i = 0; i < tiles; ++i) {
      const int b = int(i & 1);
      const uint64_t n = std::min(tile_rows, rows - i * tile_rows);
      for (int c = 0; c <= q; ++c)
        check_cuda(cudaMemcpyAsync(dbuf[b][c], hbuf[b][c], n * 4, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      plain_cols tc{};
      for (int c = 0; c <= q; ++c) tc.c[c] = {dbuf[b][c], n};
      run_plain(tc, q, stream);
      cudaEventRecord(tile_done[b], stream);
      if (i + 1 < tiles) {
        // The other buffer's last use was tile i - 1's copy: wait for it.
        if (i >= 1) cudaEventSynchronize(tile_done[1 - b]);
        read_tile(i + 1, 1 - b);
      }
    }
    check_cuda(cudaStreamSynchronize(stream), "tiling");
    const double tiling_s = since(t0);
    const taxi_query_result tile_r = result();
    emit("tiling", tiling_s, tile_r, rows * 4 * uint64_t(q + 1), {{"tile_rows", tile_rows}, {"read_threads", threads}});
    json agree = base;
    agree["method"] = "agreement";
    agree["all_equal"] = same(dw.result, floor_r, q) && same(dp.result, floor_r, q) && same(dq.result, floor_r, q) &&
                        same(dh_r, floor_r, q) && same(tile_r, floor_r, q);
    std::printf("%s\n", agree.dump().c_str());
  }
  ::close(fd);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "taxi_bench: %s\n", e.what());
  return 2;
}
