// `deepwell graph <algorithm> --cpu`: the same algorithms with CPU threads as
// the clients, through a host page cache (or straight from the mapped file
// with --mode memory). For machines without a GPU, and for trying options.
#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/page_cache.hpp"
#include "graph_dispatch.hpp"

namespace deepwell::tools {

int run_graph_cpu(const graph_run_options& o) {
  csr_file f(o.file);
  check_algorithm(o, f);
  if (o.mode != "deepwell" && o.mode != "memory")
    throw error("with --cpu, --mode is deepwell or memory (zerocopy is a GPU mode)");
  const uint32_t source = pick_source(o, f);
  const uint64_t data_bytes = f.neighbours_bytes() + (needs_weights(o.algo) ? f.weights_bytes() : 0);
  cpu_exec x(o.threads);
  x.set_long_lists(o.long_lists);
  nlohmann::json base = {{"suite", "graph"}, {"commit", o.commit}, {"device", "cpu"}, {"graph", graph_json(f)},
                         {"source", source}, {"location", o.location}};
  std::printf("%s: %llu nodes, %llu edges, source %u, CPU threads as clients\n", f.path().c_str(),
              (unsigned long long)f.nodes(), (unsigned long long)f.edges(), source);
  if (o.cold) std::printf("cold: %.1f%% still resident after dropping\n", 100 * drop_from_page_cache(f));
  outcome first;
  std::string agreement = "agree";
  for (unsigned rep = 0; rep < o.repeat; ++rep) {
    outcome r;
    nlohmann::json j = base;
    std::string text;
    if (o.mode == "memory") {
      r = run_algorithm(x, memory_graph{f.nodes(), f.offsets(), f.neighbours32(), f.weights()}, o, source,
                        f.header().flags);
    } else {
      controller_config cc;
      cc.pollers = o.pollers;
      controller ctl(cc);
      const cache_config k = graph_cache_config(o, data_bytes, 64ull * o.page_size);
      auto cache = make_host_page_cache(ctl, k);
      graph_arrays arrays(ctl, cache, f, graph_datasets(o));
      const bool stream = o.stream && arrays.edges_direct();
      cached_graph g = arrays.view(o.offsets_in_cache ? nullptr : f.offsets(), stream);
      g.pin_free_strides = o.pin_free_strides;
      r = run_algorithm(x, g, o, source, f.header().flags);
      const cache_outcome c = cache_outcome_of(*cache, r, stream);
      char buf[160];
      std::snprintf(buf, sizeof buf, "hit rate %.3f, amplification %.2f (cache %.1f MiB)", c.stats.hit_rate(),
                    c.amplification, double(k.capacity_bytes) / (1 << 20));
      text = buf;
      j.update({{"cache_bytes", k.capacity_bytes}, {"page_size", k.page_size}, {"hit_rate", c.stats.hit_rate()},
                {"bytes_read", c.bytes_read()}, {"amplification", c.amplification}});
    }
    j.update(run_json(o.mode, r));
    append_json(o.json, j);
    print_run(o.mode, r, text);
    if (r.stats.bad_ids) agreement = "corrupt graph: neighbour ids out of range";
    if (rep == 0) first = std::move(r);
  }
  if (o.check) {
    const std::string d = compare(reference(o, f, source), first);
    std::printf("check against the CPU reference: %s\n", d.empty() ? "equal" : d.c_str());
    if (!d.empty()) agreement = "differs from the CPU reference: " + d;
  }
  std::printf("results: %s\n", agreement.c_str());
  return agreement == "agree" ? 0 : 1;
}

}  // namespace deepwell::tools
