// `deepwell graph <algorithm> --cpu`: the same algorithms with CPU threads as
// the clients, through a host page cache (or straight from the mapped file
// with --mode memory). For machines without a GPU, and for trying options.
// --baselines runs both modes (zerocopy and the H2D ceiling are GPU-only).
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "graph_dispatch.hpp"
#include "ticker.hpp"
#include "watched_exec.hpp"

namespace deepwell::tools {

namespace {

// The threads the executor runs (parallel_for's count for `threads`).
unsigned client_threads(unsigned threads) { return deepwell::detail::thread_count(threads); }

// The host cache must let every client thread pin its pages at once
// (page_cache::check_capacity); say so in the command's own terms before a
// run that would otherwise end in "cache exhausted" I/O errors.
void check_cpu_cache(const page_cache& cache, const cache_config& k, unsigned threads) {
  const uint64_t need_pages = uint64_t(threads) * pages_per_warp;
  if (cache.slots() >= need_pages) return;
  const uint64_t need_bytes = need_pages * k.page_size;
  char b[96];
  std::snprintf(b, sizeof b, "%.0f KiB", double(need_bytes) / 1024);
  throw error("--cache " + std::to_string(k.capacity_bytes) + " bytes is too small for this run: its " +
              std::to_string(threads) + " CPU client thread(s) may each pin " + std::to_string(pages_per_warp) +
              " pages of " + std::to_string(k.page_size) + " bytes at once, " + std::to_string(need_pages) +
              " pages in all, and the cache holds " + std::to_string(cache.slots()) + ": give --cache " + b +
              " or more (or fewer --threads)");
}

}  // namespace

int run_graph_cpu(const graph_run_options& o) {
  csr_file f(o.file);
  check_algorithm(o, f);
  if (o.mode != "deepwell" && o.mode != "memory")
    throw error("with --cpu, --mode is deepwell or memory (zerocopy is a GPU mode)");
  const uint32_t source = pick_source(o, f);
  const uint64_t data_bytes = f.neighbours_bytes() + (needs_weights(o.algo) ? f.weights_bytes() : 0);
  const unsigned threads = client_threads(o.threads);
  watched_cpu_exec x(o.threads);
  x.set_long_lists(o.long_lists);
  nlohmann::json base = {{"suite", "graph"}, {"commit", o.commit}, {"device", "cpu"}, {"graph", graph_json(f)},
                         {"source", source}, {"location", o.location}, {"checksums", o.checksums}};
  std::printf("%s: %llu nodes, %llu edges, source %u, %u CPU threads as clients\n", f.path().c_str(),
              (unsigned long long)f.nodes(), (unsigned long long)f.edges(), source, threads);
  // On CPU threads the baselines are the two CPU modes: the host page cache
  // and the mapped file (zerocopy and the H2D ceiling measure a GPU's link).
  const std::vector<std::string> modes =
      o.baselines ? std::vector<std::string>{"deepwell", "memory"} : std::vector<std::string>{o.mode};
  if (o.baselines)
    std::printf("baselines on CPU threads: deepwell (host page cache) and memory (the mapped file); zerocopy and "
                "the H2D ceiling need a GPU run (without --cpu)\n");
  if (o.cold) std::printf("cold: %.1f%% still resident after dropping\n", 100 * drop_from_page_cache(f));
  outcome first;
  bool have_first = false;
  std::string agreement = "agree";
  for (const std::string& mode : modes) {
    for (unsigned rep = 0; rep < o.repeat; ++rep) {
      outcome r;
      nlohmann::json j = base;
      std::string text;
      x.reset_progress();
      ticker tick(o.algo + " (" + mode + ", CPU threads)", [&] { return x.status(o.algo, o.iterations); });
      if (mode == "memory") {
        r = run_algorithm(x, memory_graph{f.nodes(), f.offsets(), f.neighbours32(), f.weights()}, o, source,
                          f.header().flags);
      } else {
        const cache_config k = graph_cache_config(o, data_bytes, uint64_t(threads) * pages_per_warp * o.page_size);
        auto cache = make_host_page_cache(graph_link(o), k);
        check_cpu_cache(*cache, k, threads);
        graph_arrays arrays(cache, f, graph_datasets(o));
        const bool stream = o.stream && arrays.edges_direct();
        cached_graph g = arrays.view(o.offsets_in_cache ? nullptr : f.offsets(), stream);
        g.pin_free_strides = o.pin_free_strides;
        r = run_algorithm(x, g, o, source, f.header().flags);
        if (cache->mapped_file_cut())  // its lost pages read as zeros: the result is not the graph's
          throw error(f.path() + ": the file was truncated while it was being read");
        const cache_outcome c = cache_outcome_of(*cache, f, r, stream);
        char buf[160];
        std::snprintf(buf, sizeof buf, "hit rate %.3f, amplification %.2f (cache %.1f MiB)", c.stats.hit_rate(),
                      c.amplification, double(k.capacity_bytes) / (1 << 20));
        text = buf;
        j.update({{"cache_bytes", k.capacity_bytes}, {"page_size", k.page_size}, {"hit_rate", c.stats.hit_rate()},
                  {"bytes_read", c.bytes_read()}, {"amplification", c.amplification}});
      }
      tick.stop();
      f.check_whole();  // the offsets (and in memory mode all of it) read from the file's mapping
      j.update(run_json(mode, r));
      if (have_first) {
        const std::string d = compare(first, r);
        j["agrees_with_first_mode"] = d.empty();
        if (!d.empty()) agreement = mode + " differs from " + modes.front() + ": " + d;
      }
      append_json(o.json, j);
      print_run(mode, r, text);
      if (r.stats.bad_ids) agreement = "corrupt graph: neighbour ids out of range";
      if (!have_first) {
        first = std::move(r);
        have_first = true;
      }
    }
  }
  if (o.check) {
    ticker tick("the CPU reference for --check (one thread)");
    const std::string d = compare(reference(o, f, source), first);
    tick.stop();
    std::printf("check against the CPU reference: %s\n", d.empty() ? "equal" : d.c_str());
    if (!d.empty()) agreement = "differs from the CPU reference: " + d;
  }
  std::printf("results: %s\n", agreement.c_str());
  return agreement == "agree" ? 0 : 1;
}

}  // namespace deepwell::tools
