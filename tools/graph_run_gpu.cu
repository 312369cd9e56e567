// `deepwell graph bfs|cc|pagerank|sssp` on the GPU: deepwell (edges through
// the GPU page cache), and the baselines BaM compares with, in one process:
//   memory    the whole graph in GPU memory (the compute-only floor);
//   zerocopy  the graph loaded into pinned host memory and read by the GPU
//             over the link (EMOGI; BaM's target system "T"), timed with and
//             without the load.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/gpu_exec.cuh"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "deepwell/link/memcpy_ceiling.hpp"  // the H2D ceiling (--baselines)
#include "deepwell/cache/page_cache.hpp"
#include "graph_dispatch.hpp"

namespace deepwell::tools {

namespace {

using clk = std::chrono::steady_clock;
double since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }

// The file's first `bytes` (header, offsets, neighbours, and weights when
// needed) in pinned host memory, mapped for the GPU.
struct pinned_graph {
  uint8_t* p = nullptr;
  uint64_t bytes = 0;
  double pin_seconds = 0, read_seconds = 0;
  ~pinned_graph() {
    if (p) cudaFreeHost(p);
  }
};

std::unique_ptr<pinned_graph> load_pinned(const csr_file& f, uint64_t bytes, unsigned threads) {
  auto g = std::make_unique<pinned_graph>();
  g->bytes = bytes;
  auto t = clk::now();
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&g->p), bytes, cudaHostAllocMapped), "cudaHostAlloc(graph)");
  g->pin_seconds = since(t);
  t = clk::now();
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + f.path(), errno));
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  const uint64_t chunk = 64ull << 20;
  std::atomic<uint64_t> next{0};
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back([&] {
      for (;;) {
        const uint64_t at = next.fetch_add(chunk);
        if (at >= bytes) return;
        const uint64_t len = std::min(chunk, bytes - at);
        uint64_t done = 0;
        while (done < len) {
          const ssize_t n = ::pread(fd, g->p + at + done, len - done, off_t(at + done));
          if (n <= 0) {
            failed = true;
            return;
          }
          done += uint64_t(n);
        }
      }
    });
  for (auto& th : pool) th.join();
  ::close(fd);
  if (failed) throw error("reading " + f.path() + " into pinned memory failed");
  g->read_seconds = since(t);
  return g;
}

memory_graph graph_at(const csr_file& f, const uint8_t* base) {
  memory_graph g;
  g.n = f.nodes();
  g.offsets = reinterpret_cast<const uint64_t*>(base + f.header().offsets_at);
  g.nbr = reinterpret_cast<const uint32_t*>(base + f.header().neighbours_at);
  g.wts = f.weights() ? reinterpret_cast<const uint32_t*>(base + f.header().weights_at) : nullptr;
  return g;
}

const char* gpu_name() {
  static cudaDeviceProp p{};
  static bool got = false;
  if (!got) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&p, dev);
    got = true;
  }
  return p.name;
}

}  // namespace

int run_graph_gpu(const graph_run_options& o) {
  csr_file f(o.file);
  check_algorithm(o, f);
  const uint32_t source = pick_source(o, f);
  const bool weighted = needs_weights(o.algo);
  const uint64_t data_bytes = f.neighbours_bytes() + (weighted ? f.weights_bytes() : 0);
  // What the zero-copy and in-memory baselines load: the file up to the last section they need.
  const uint64_t load_bytes = weighted || f.header().weights == weight_type::none
                                  ? f.header().file_bytes
                                  : graph::align_up(f.header().neighbours_at + f.neighbours_bytes(), csr_section_align);
  gpu_exec x;
  x.set_long_lists(o.long_lists);

  nlohmann::json base = {{"suite", "graph"},
                         {"commit", o.commit},
                         {"device", gpu_name()},
                         {"graph", graph_json(f)},
                         {"source", source},
                         {"location", o.location},
                         {"checksums", o.checksums},
                         {"repeat", o.repeat}};
  std::printf("%s: %llu nodes, %llu edges (%.2f GiB of edges%s), source %u, %s\n", f.path().c_str(),
              (unsigned long long)f.nodes(), (unsigned long long)f.edges(), double(f.neighbours_bytes()) / (1 << 30),
              weighted ? " + weights" : "", source, gpu_name());

  if (o.cold) {
    const double left = drop_from_page_cache(f);
    std::printf("cold: dropped %s from the page cache (%.1f%% still resident)\n", f.path().c_str(), 100 * left);
    base["resident_before"] = left;
  } else if (o.location == "pagecache") {
    if (resident_fraction(f.path()) < 0.999) warm_page_cache(f.path());
    base["resident_before"] = resident_fraction(f.path());
  }

  std::vector<std::string> modes = o.baselines ? std::vector<std::string>{"deepwell", "zerocopy", "memory"}
                                               : std::vector<std::string>{o.mode};
  std::vector<outcome> results;
  nlohmann::json summary = base;
  double best_deepwell = 0, best_zero = 0, best_memory = 0, load_seconds = 0;
  uint64_t needed = 0;
  std::unique_ptr<pinned_graph> pinned;
  std::string agreement = "agree";

  for (const std::string& mode : modes) {
    if (mode != "deepwell" && mode != "zerocopy" && mode != "memory")
      throw error("unknown mode '" + mode + "' (deepwell, zerocopy, memory)");
    double best = 0;
    auto record = [&](outcome r, nlohmann::json extra, const std::string& text) {
      nlohmann::json j = base;
      j.update(run_json(mode, r));
      j.update(extra);
      if (!results.empty()) {
        const std::string d = compare(results.front(), r);
        j["agrees_with_first_mode"] = d.empty();
        if (!d.empty()) agreement = mode + " differs from " + modes.front() + ": " + d;
      }
      if (r.stats.bad_ids) agreement = "corrupt graph: " + std::to_string(r.stats.bad_ids) + " neighbour ids out of range";
      f.check_whole();  // what was read from the file's mapping was the file's
      append_json(o.json, j);
      print_run(mode, r, text);
      best = best == 0 ? r.stats.seconds : std::min(best, r.stats.seconds);
      if (results.empty() || mode == "memory") needed = bytes_needed(r);
      if (results.empty()) results.push_back(std::move(r));
    };

    if (mode == "deepwell") {
      // In process, the controller is kept to report its pollers' CPU time.
      std::shared_ptr<controller> ctl;
      std::shared_ptr<controller_link> link;
      if (o.server.empty()) {
        controller_config cc;
        if (o.pollers) cc.pollers = o.pollers;
        ctl = std::make_shared<controller>(cc);
        link = in_process_link(ctl);
      } else {
        link = graph_link(o);
      }
      const cache_config k = graph_cache_config(o, data_bytes, 512ull << 20);
      auto cache = make_gpu_page_cache(link, k);
      cache->check_capacity(x.warps());
      const graph_dataset_options d = graph_datasets(o);
      graph_arrays arrays(cache, f, d);
      uint64_t* offsets_dev = nullptr;
      if (!o.offsets_in_cache) {
        check_cuda(cudaMalloc(&offsets_dev, f.offsets_bytes()), "cudaMalloc(offsets)");
        check_cuda(cudaMemcpy(offsets_dev, f.offsets(), f.offsets_bytes(), cudaMemcpyHostToDevice), "copy offsets");
      }
      const bool stream = o.stream && arrays.edges_direct();
      cached_graph g = arrays.view(offsets_dev, stream);
      g.pin_free_strides = o.pin_free_strides;
      for (unsigned rep = 0; rep < o.repeat; ++rep) {
        if (rep && o.cold) drop_from_page_cache(f);
        if (!(rep && o.keep_cache))
          if (const request_status s = cache->clear(); !s.ok()) throw error("clearing the cache: " + describe(s));
        cache->reset_stats();
        outcome r = run_algorithm(x, g, o, source, f.header().flags);
        const cache_outcome c = cache_outcome_of(*cache, f, r, stream);
        char text[220];
        std::snprintf(text, sizeof text, "hit rate %.3f, read %.2f GiB%s, amplification %.2f (cache %.2f GiB, %u B pages, %s)",
                      c.stats.hit_rate(), double(c.bytes_read()) / (1 << 30), c.streamed ? " (some in place)" : "",
                      c.amplification, double(k.capacity_bytes) / (1 << 30), k.page_size,
                      d.direct_io ? "O_DIRECT" : arrays.edges_direct() ? "direct" : "controller");
        record(std::move(r),
               {{"cache_bytes", k.capacity_bytes}, {"page_size", k.page_size},
                {"tier", arrays.edges_direct() ? "direct" : "controller"}, {"streamed_bytes", c.streamed},
                {"offsets_in_cache", o.offsets_in_cache}, {"pin_free_strides", o.pin_free_strides},
                {"kept_cache", rep && o.keep_cache}, {"hit_rate", c.stats.hit_rate()},
                {"bytes_read", c.bytes_read()}, {"cache_bytes_read", c.stats.bytes_read}, {"amplification", c.amplification},
                {"controller_cpu_seconds", ctl ? nlohmann::json(ctl->poller_cpu_seconds()) : nlohmann::json()}},
               text);
      }
      if (offsets_dev) cudaFree(offsets_dev);
      best_deepwell = best;
    } else {
      if (!pinned) {
        const auto t = clk::now();
        pinned = load_pinned(f, load_bytes, 8);
        load_seconds = pinned->read_seconds;
        std::printf("loaded %.2f GiB into pinned host memory: pin %.2f s, read %.2f s (%.1f GB/s), %.2f s total\n",
                    double(load_bytes) / (1 << 30), pinned->pin_seconds, pinned->read_seconds,
                    double(load_bytes) / pinned->read_seconds / 1e9, since(t));
      }
      if (mode == "zerocopy") {
        const memory_graph g = graph_at(f, pinned->p);
        for (unsigned rep = 0; rep < o.repeat; ++rep) {
          outcome r = run_algorithm(x, g, o, source, f.header().flags);
          char text[160];
          std::snprintf(text, sizeof text, "with the load: %.4f s (read %.2f s, pinning %.2f s more)",
                        r.stats.seconds + pinned->read_seconds, pinned->read_seconds, pinned->pin_seconds);
          record(std::move(r), {{"load_seconds", pinned->read_seconds}, {"pin_seconds", pinned->pin_seconds}}, text);
        }
        best_zero = best;
      } else {
        size_t free_b = 0, total_b = 0;
        check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        if (load_bytes + f.nodes() * 24 + (1ull << 30) > free_b) {
          std::printf("memory   skipped: the graph (%.2f GiB) does not fit in free GPU memory (%.2f GiB)\n",
                      double(load_bytes) / (1 << 30), double(free_b) / (1 << 30));
          continue;
        }
        uint8_t* dev = nullptr;
        check_cuda(cudaMalloc(&dev, load_bytes), "cudaMalloc(graph)");
        check_cuda(cudaMemcpy(dev, pinned->p, load_bytes, cudaMemcpyHostToDevice), "copy graph to the GPU");
        const memory_graph g = graph_at(f, dev);
        for (unsigned rep = 0; rep < o.repeat; ++rep) record(run_algorithm(x, g, o, source, f.header().flags), nlohmann::json::object(), "");
        cudaFree(dev);
        best_memory = best;
      }
    }
  }

  if (o.check) {
    const outcome ref = reference(o, f, source);
    const std::string d = compare(ref, results.front());
    std::printf("check against the CPU reference: %s\n", d.empty() ? "equal" : d.c_str());
    if (!d.empty()) agreement = "differs from the CPU reference: " + d;
    summary["reference_check"] = d.empty();
  }
  if (o.baselines) {
    const double h2d = measure_h2d_gbps();
    const double t_with_load = best_zero + load_seconds;
    const double floor_s = std::max(best_memory, double(needed) / (h2d * 1e9));
    summary["h2d_gbps"] = h2d;
    summary["bytes_needed"] = needed;
    summary["deepwell_seconds"] = best_deepwell;
    summary["zerocopy_seconds"] = best_zero;
    summary["zerocopy_load_seconds"] = load_seconds;
    summary["memory_seconds"] = best_memory;
    summary["floor_seconds"] = floor_s;
    summary[o.algo + "_vs_T_with_load"] = best_deepwell / t_with_load;
    summary[o.algo + "_vs_T"] = best_deepwell / best_zero;
    summary[o.algo + "_vs_floor"] = best_deepwell / floor_s;
    std::printf("%s: deepwell / T with load %.3f, / T %.3f, / floor %.3f (floor %.4f s: memory %.4f s, %.2f GB needed at %.1f GB/s H2D)\n",
                o.algo.c_str(), best_deepwell / t_with_load, best_deepwell / best_zero, best_deepwell / floor_s, floor_s,
                best_memory, double(needed) / 1e9, h2d);
  }
  summary["mode"] = "summary";
  summary["algo"] = o.algo;
  summary["results"] = agreement;
  append_json(o.json, summary);
  std::printf("results: %s\n", agreement.c_str());
  return agreement == "agree" ? 0 : 1;
}

}  // namespace deepwell::tools
