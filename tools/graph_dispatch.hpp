// What the CPU and GPU graph runners share: running the chosen algorithm
// over any executor and graph view, comparing two results, the CPU
// reference, page-cache residency control, and the report (text and JSON).
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "json_lines.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/checked_runs.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/graph/reference.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/targets/target.hpp"
#include "graph_options.hpp"

namespace deepwell::tools {

using namespace deepwell::graph;

struct outcome {
  std::string algo;
  run_stats stats;
  std::vector<uint32_t> u32;             // BFS depths, CC labels
  std::vector<unsigned long long> u64;   // SSSP distances
  std::vector<float> f32;                // PageRank
  uint64_t summary = 0;                  // BFS: nodes reached; CC: components; SSSP: nodes reached
  unsigned bottom_up_levels = 0;
  uint64_t bottom_up_edges = 0;
  std::vector<graph::bfs_level> levels;  // BFS
};

inline bool needs_weights(const std::string& algo) { return algo == "sssp"; }

// Bytes of edge data the algorithm needed: the entries it looked at (and their weights).
inline uint64_t bytes_needed(const outcome& r) { return r.stats.edges_looked * (needs_weights(r.algo) ? 8 : 4); }

inline void check_algorithm(const graph_run_options& o, const csr_file& f) {
  if (o.algo != "bfs" && o.algo != "cc" && o.algo != "pagerank" && o.algo != "sssp")
    throw error("unknown algorithm '" + o.algo + "' (bfs, cc, pagerank, sssp)");
  if (f.header().id_bytes != 4) throw error(f.path() + ": graph algorithms need 4-byte node ids");
  if (needs_weights(o.algo) && f.header().weights != weight_type::u32)
    throw error(f.path() + ": SSSP needs uint32 edge weights (generate with --weights)");
  // What reads the mapped file is checked first: the offsets, which every
  // mode reads from it, and the whole file for the modes that read the edge
  // lists from it too (memory, zerocopy, the CPU reference of --check).
  // deepwell's own runs
  // read the edge lists through checked datasets (graph_datasets): every
  // page is checked as it is read, and a file larger than memory is not
  // read twice.
  const bool whole = o.baselines || o.check || o.mode != "deepwell";
  if (!o.checksums)
    ;  // the caller's choice (--no-checksums): nothing is checked
  else if (whole)
    f.verify(o.threads);
  else
    f.verify(csr_section::offsets, o.threads);
  f.check_offsets(o.threads);  // a corrupt offset would send a list past the neighbour array
}

// The source: given, or the node of largest degree (in the giant component of a Kronecker graph).
inline uint32_t pick_source(const graph_run_options& o, const csr_file& f) {
  if (o.source >= 0) {
    if (uint64_t(o.source) >= f.nodes())
      throw error("source node " + std::to_string(o.source) + " is out of range (the graph has " +
                  std::to_string(f.nodes()) + " nodes)");
    return uint32_t(o.source);
  }
  return uint32_t(f.max_degree_node());
}

template <class Exec, class G>
outcome run_algorithm(Exec& x, const G& g, const graph_run_options& o, uint32_t source, uint32_t flags) {
  outcome r;
  r.algo = o.algo;
  if (o.algo == "bfs") {
    bfs_options b;
    b.source = source;
    b.direction_optimizing = !o.top_down_only;
    bfs_result br = bfs(x, g, b);
    r.stats = br.stats;
    r.summary = br.reached;
    r.bottom_up_levels = br.bottom_up_levels;
    r.bottom_up_edges = br.bottom_up_edges;
    r.levels = br.levels;
    r.u32 = std::move(br.depth);
  } else if (o.algo == "cc") {
    cc_result c = connected_components(x, g, flags);
    r.stats = c.stats;
    r.summary = c.components;
    r.u32 = std::move(c.label);
  } else if (o.algo == "pagerank") {
    pagerank_options p;
    p.iterations = o.iterations;
    pagerank_result pr = pagerank(x, g, p);
    r.stats = pr.stats;
    r.f32 = std::move(pr.rank);
  } else {
    sssp_result s = sssp(x, g, source);
    r.stats = s.stats;
    for (auto d : s.dist) r.summary += d != ~0ull;
    r.u64 = std::move(s.dist);
  }
  return r;
}

// "" when equal (PageRank: L1 distance below 1e-4 with ranks summing to 1), else what differs.
inline std::string compare(const outcome& a, const outcome& b) {
  if (a.algo == "pagerank") {
    if (a.f32.size() != b.f32.size()) return "sizes differ";
    double l1 = 0;
    for (size_t i = 0; i < a.f32.size(); ++i) l1 += std::fabs(double(a.f32[i]) - double(b.f32[i]));
    return l1 < 1e-4 ? "" : "PageRank L1 distance " + std::to_string(l1);
  }
  auto first_diff = [](const auto& x, const auto& y) -> std::string {
    if (x.size() != y.size()) return "sizes differ";
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i])
        return "node " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " + std::to_string(y[i]);
    return "";
  };
  return a.algo == "sssp" ? first_diff(a.u64, b.u64) : first_diff(a.u32, b.u32);
}

inline outcome reference(const graph_run_options& o, const csr_file& f, uint32_t source) {
  f.check(o.threads);  // the reference indexes its arrays with every id: a corrupt one is an error, not a crash
  const csr_view v = view_of(f);
  outcome r;
  r.algo = o.algo;
  if (o.algo == "bfs") {
    r.u32 = bfs_reference(v, source);
  } else if (o.algo == "cc") {
    r.u32 = cc_reference(v);
  } else if (o.algo == "pagerank") {
    const std::vector<double> p = pagerank_reference(v, o.iterations);
    r.f32.assign(p.begin(), p.end());
  } else {
    const std::vector<uint64_t> d = sssp_reference(v, source);
    r.u64.assign(d.begin(), d.end());
  }
  return r;
}

// The deepwell cache and datasets a run asks for: `--cache` or an eighth of
// the bytes the algorithm reads (at least `min_bytes`); the direct tier for
// a resident file unless --tier controller or O_DIRECT.
inline cache_config graph_cache_config(const graph_run_options& o, uint64_t data_bytes, uint64_t min_bytes) {
  cache_config k;
  k.page_size = o.page_size;
  k.capacity_bytes = o.cache_bytes ? o.cache_bytes : std::max<uint64_t>(data_bytes / 8, min_bytes);
  k.direct_files = o.tier == "direct" && o.location == "pagecache" ? cache_config::file_tier::resident
                                                                   : cache_config::file_tier::never;
  return k;
}
inline graph_dataset_options graph_datasets(const graph_run_options& o) {
  graph_dataset_options d;
  d.direct_io = o.location == "odirect";
  d.block_size = std::min<uint32_t>(o.page_size, 4096);
  d.check_offsets = false;  // check_algorithm did, once for every mode
  d.checked = o.checksums;
  return d;
}

// What a deepwell run read: the cache's statistics plus the bytes read in
// place (bottom-up BFS on the direct tier: whole 128-byte strides), and the
// amplification over the bytes the algorithm needed. Throws if any access
// failed.
struct cache_outcome {
  cache_stats stats;
  uint64_t streamed = 0;
  double amplification = 0;
  uint64_t bytes_read() const { return stats.bytes_read + streamed; }
};
inline cache_outcome cache_outcome_of(const page_cache& cache, const csr_file& f, const outcome& r, bool streaming) {
  if (const request_status e = cache.last_error(); !e.ok()) {
    if (e.code == client_code::cache_exhausted)  // not the storage: the cache had no free page for a while
      throw error("the cache (" + std::to_string(cache.slots()) + " pages of " + std::to_string(cache.page_size()) +
                  " bytes) ran out of free pages during " + r.algo + ": give a bigger --cache");
    throw error(f.path() + ": deepwell reported an I/O error during " + r.algo + ": " + describe(e) +
                graph::detail::corruption_hint(e));
  }
  cache_outcome c;
  c.stats = cache.stats();
  c.streamed = streaming ? r.bottom_up_edges * 4 : 0;
  c.amplification = bytes_needed(r) ? double(c.bytes_read()) / double(bytes_needed(r)) : 0;
  return c;
}

// Fraction of the file's pages in the page cache (the file target's
// read-only mapping measures it with mincore).
inline double resident_fraction(const std::string& path) {
  const std::shared_ptr<host_mapping> m = open_file_target(path)->map_readonly();
  return m ? m->resident : 0;
}

// Drops the file from the page cache (our own mapping's pages first);
// returns the fraction still resident after (mincore).
inline double drop_from_page_cache(const csr_file& f) {
  f.release_pages();
  const std::string& path = f.path();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return resident_fraction(path);
}

// Reads the whole file once so its pages are in the page cache (warm runs).
inline void warm_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

inline nlohmann::json graph_json(const csr_file& f) {
  return {{"file", f.path()},
          {"nodes", f.nodes()},
          {"edges", f.edges()},
          {"origin", std::string(f.header().origin, strnlen(f.header().origin, sizeof(f.header().origin)))},
          {"symmetric", f.symmetric()},
          {"edge_bytes", f.neighbours_bytes()},
          {"weight_bytes", f.weights_bytes()}};
}


inline void print_run(const std::string& mode, const outcome& r, const std::string& extra) {
  std::printf("%-9s %-8s %9.4f s  %8.1f M edges/s  %s\n", r.algo.c_str(), mode.c_str(), r.stats.seconds,
              r.stats.seconds > 0 ? double(r.stats.edges_looked) / r.stats.seconds / 1e6 : 0.0, extra.c_str());
  std::fflush(stdout);
}

inline nlohmann::json run_json(const std::string& mode, const outcome& r) {
  nlohmann::json j = {{"mode", mode},
                      {"algo", r.algo},
                      {"seconds", r.stats.seconds},
                      {"edges_looked", r.stats.edges_looked},
                      {"bytes_needed", bytes_needed(r)},
                      {"iterations", r.stats.iterations},
                      {"bad_ids", r.stats.bad_ids}};
  if (r.algo == "bfs") {
    j["reached"] = r.summary;
    j["bottom_up_levels"] = r.bottom_up_levels;
    nlohmann::json levels = nlohmann::json::array();
    for (const graph::bfs_level& l : r.levels)
      levels.push_back({{"bottom_up", l.bottom_up}, {"frontier", l.frontier}, {"edges_looked", l.edges_looked},
                        {"seconds", l.seconds}});
    j["levels"] = levels;
  }
  if (r.algo == "cc") j["components"] = r.summary;
  if (r.algo == "sssp") j["reached"] = r.summary;
  return j;
}

}  // namespace deepwell::tools
