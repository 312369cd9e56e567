// The recoverable BFS (apps/recoverable_bfs/recoverable_bfs.hpp) against
// the plain GPU BFS over the same graph, cache and executor, in one process:
//
//   recoverable_bfs_bench [--scale 25] [--kind kron] [--dir /var/tmp] [--repeat 3]
//
// generates the graph (deterministic; kept in DIR and reused while its
// origin matches), runs the plain BFS (algorithms.hpp's bfs: depths in GPU
// memory, nothing durable) and the recoverable one (every level persisted
// to a state file in DIR before the next starts) alternately, and prints one
// JSON object: the best time of each and recoverable_bfs_overhead = with /
// without (goal <= 1.3), the depths checked equal.
//
// Kill tests: `--resume` runs only the recoverable BFS, resuming the state
// file if it holds a valid state (a new one otherwise, or with --fresh);
// `--level-delay-ms N` sleeps after each commit so the process can be
// killed between and during levels; `--check` compares the depths with
// the CPU reference. docs/recoverable-bfs.md has the kill -9 script.
#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/gpu_exec.cuh"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "recoverable_bfs/recoverable_bfs.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/graph/reference.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

std::string origin_of(const std::string& path) {
  csr_header h{};
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "";
  const bool ok = ::pread(fd, &h, sizeof h, 0) == ssize_t(sizeof h);
  ::close(fd);
  if (!ok || std::memcmp(h.magic, csr_magic, sizeof csr_magic) != 0) return "";
  return std::string(h.origin, strnlen(h.origin, sizeof h.origin));
}

void warm_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

std::string filesystem_of(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown";
  switch (uint64_t(s.f_type)) {
    case 0x01021994: return "tmpfs";
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794C7630: return "overlayfs";
    default: {
      char b[32];
      std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)s.f_type);
      return b;
    }
  }
}

const char* gpu_name() {
  static cudaDeviceProp p{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&p, dev);
  return p.name;
}

uint64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (end && *end ? *end : ' ') {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return uint64_t(v);
}

struct device_offsets {
  uint64_t* p = nullptr;
  explicit device_offsets(const csr_file& f) {
    check_cuda(cudaMalloc(&p, f.offsets_bytes()), "cudaMalloc(offsets)");
    check_cuda(cudaMemcpy(p, f.offsets(), f.offsets_bytes(), cudaMemcpyHostToDevice), "copy offsets");
  }
  ~device_offsets() { cudaFree(p); }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"recoverable BFS (per-level persists) against the plain GPU BFS"};
  std::string kind = "kron", dir = "/var/tmp", graph_path, state_path, cache_size, tier = "direct";
  unsigned scale = 25, degree = 16, repeat = 3, level_delay_ms = 0, pollers = 0;
  uint64_t seed = 1;
  uint32_t page = 4096, max_levels = ~0u;
  bool resume = false, fresh = false, check = false, store_depths = false, state_odirect = false;
  app.add_option("--kind", kind, "kron or uniform");
  app.add_option("--scale", scale, "2^scale nodes");
  app.add_option("--degree", degree, "generated edges per node");
  app.add_option("--seed", seed, "generator seed");
  app.add_option("--dir", dir, "where the graph and the state file go");
  app.add_option("--graph", graph_path, "the graph file (default DIR/KIND-sSCALE-dDEGREE.dwg; generated if missing)");
  app.add_option("--state", state_path, "the state file (default: the graph's name with .rbfs)");
  app.add_option("--cache", cache_size, "cache size (default: an eighth of the edge bytes, at least 512M)");
  app.add_option("--page", page, "cache page size");
  app.add_option("--tier", tier, "direct (the graph file's mapping) or controller");
  app.add_option("--repeat", repeat, "runs of each, best taken");
  app.add_option("--pollers", pollers, "controller poller threads (0: the default)");
  app.add_flag("--store-depths", store_depths, "write the whole depth array to the state at the end");
  app.add_flag("--state-odirect", state_odirect, "open the state file with O_DIRECT");
  app.add_flag("--resume", resume, "only the recoverable BFS: resume the state (or start one)");
  app.add_flag("--fresh", fresh, "with --resume: start a new state whatever the file holds");
  app.add_flag("--check", check, "compare the depths with the CPU reference");
  app.add_option("--level-delay-ms", level_delay_ms, "sleep after each commit (kill tests)");
  app.add_option("--max-levels", max_levels, "with --resume: stop after this many levels");
  CLI11_PARSE(app, argc, argv);

  try {
    if (kind != "kron" && kind != "uniform") throw error("--kind: kron or uniform");
    if (tier != "direct" && tier != "controller") throw error("--tier: direct or controller");
    if (graph_path.empty())
      graph_path = dir + "/" + kind + "-s" + std::to_string(scale) + "-d" + std::to_string(degree) + ".dwg";
    if (state_path.empty()) state_path = graph_path.substr(0, graph_path.rfind('.')) + ".rbfs";
    nlohmann::json out = {{"suite", "recoverable_bfs"}, {"device", gpu_name()}};

    // The graph: generated here unless the file is there with the same origin.
    generator_options go;
    go.kind = kind == "kron" ? generator_options::kind_t::kron : generator_options::kind_t::uniform;
    go.scale = scale;
    go.degree = degree;
    go.seed = seed;
    double gen_seconds = 0;
    const std::string want = kind + " scale=" + std::to_string(scale) + " degree=" + std::to_string(degree) +
                             " seed=" + std::to_string(seed);  // what generate() writes
    if (origin_of(graph_path) != want.substr(0, 63)) {
      const auto t = std::chrono::steady_clock::now();
      progress p(false);
      const csr_graph g = generate(go, &p);
      write_csr(graph_path, g, &p);
      gen_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    }
    if (tier == "direct") warm_page_cache(graph_path);
    csr_file f(graph_path);
    if (f.header().id_bytes != 4) throw error(graph_path + ": the algorithms need 4-byte ids");
    const uint32_t source = uint32_t(f.max_degree_node());
    out["graph"] = {{"file", graph_path}, {"nodes", f.nodes()}, {"edges", f.edges()},
                    {"origin", std::string(f.header().origin)}, {"generated_seconds", gen_seconds}};
    out["source"] = source;

    gpu_exec x;
    controller_config cc;
    if (pollers) cc.pollers = pollers;
    controller ctl(cc);
    cache_config k;
    k.page_size = page;
    k.capacity_bytes = cache_size.empty() ? std::max<uint64_t>(f.neighbours_bytes() / 8, 512ull << 20) : parse_size(cache_size);
    k.direct_files = tier == "direct" ? cache_config::file_tier::resident : cache_config::file_tier::never;
    auto cache = make_gpu_page_cache(ctl, k);
    cache->check_capacity(x.warps());
    graph_dataset_options d;
    d.block_size = std::min<uint32_t>(page, 4096);
    graph_arrays arrays(cache, f, d);
    const device_offsets off(f);
    const cached_graph g = arrays.view(off.p, arrays.edges_direct());
    auto state_target = open_bfs_state_file(state_path, f.nodes(), state_odirect);
    bfs_state st(cache, ctl.add_namespace({state_target, 4096, false}), state_path);
    out["cache_bytes"] = k.capacity_bytes;
    out["page_size"] = page;
    out["tier"] = arrays.edges_direct() ? "direct" : "controller";
    out["state"] = {{"file", state_path}, {"bytes", state_target->size()}, {"filesystem", filesystem_of(state_path)},
                    {"odirect", state_odirect}};

    recoverable_bfs_options o;
    o.source = source;
    o.graph = identity_of(f);
    o.store_depths = store_depths;
    o.graph_cache = cache.get();

    if (resume) {
      o.start = fresh ? recoverable_bfs_options::start_t::create : recoverable_bfs_options::start_t::resume_or_create;
      o.max_levels = max_levels;
      o.after_commit = [&](uint32_t level) {
        std::fprintf(stderr, "committed level %u\n", level);
        if (level_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(level_delay_ms));
      };
      const recoverable_bfs_result r = recoverable_bfs(x, g, st, o);
      out["mode"] = "resume";
      out["created"] = r.created;
      out["resumed"] = r.resumed;
      out["resumed_from"] = r.resumed_from;
      out["finished"] = r.finished;
      out["level"] = r.level;
      out["levels_run"] = r.levels_run;
      out["reached"] = r.reached;
      out["seconds"] = r.stats.seconds;
      out["recover_seconds"] = r.recover_seconds;
      if (check && r.finished) out["agrees_with_reference"] = r.depth == bfs_reference(view_of(f), source);
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }

    o.start = recoverable_bfs_options::start_t::create;
    bfs_options bo;
    bo.source = source;
    double best_plain = 0, best_rec = 0;
    bool agree = true;
    nlohmann::json runs = nlohmann::json::array();
    recoverable_bfs_result last;
    std::vector<uint32_t> plain_depth;
    for (unsigned rep = 0; rep < repeat; ++rep) {
      if (const request_status s = cache->clear(); !s.ok()) throw error("clearing the cache: " + describe(s));
      const bfs_result p = bfs(x, g, bo);
      if (const request_status s = cache->clear(); !s.ok()) throw error("clearing the cache: " + describe(s));
      const uint64_t flushes0 = ctl.total_counters().flushes, writes0 = ctl.total_counters().writes;
      last = recoverable_bfs(x, g, st, o);
      const uint64_t flushes = ctl.total_counters().flushes - flushes0, writes = ctl.total_counters().writes - writes0;
      if (!cache->last_error().ok()) throw error("cache error: " + describe(cache->last_error()));
      agree = agree && p.depth == last.depth && last.finished;
      if (rep == 0) plain_depth = p.depth;
      best_plain = rep ? std::min(best_plain, p.stats.seconds) : p.stats.seconds;
      best_rec = rep ? std::min(best_rec, last.stats.seconds) : last.stats.seconds;
      runs.push_back({{"plain_seconds", p.stats.seconds},
                      {"recoverable_seconds", last.stats.seconds},
                      {"persist_seconds", last.persist_seconds},
                      {"flushes", flushes},
                      {"writes", writes},
                      {"levels", p.stats.iterations},
                      {"bottom_up_levels", p.bottom_up_levels}});
      std::fprintf(stderr, "run %u: plain %.3f s, recoverable %.3f s (persisting %.3f s, %llu flushes)\n", rep,
                   p.stats.seconds, last.stats.seconds, last.persist_seconds, (unsigned long long)flushes);
    }
    if (check) agree = agree && plain_depth == bfs_reference(view_of(f), source);
    out["repeat"] = repeat;
    out["store_depths"] = store_depths;
    out["plain_seconds"] = best_plain;
    out["recoverable_seconds"] = best_rec;
    out["recoverable_bfs_overhead"] = best_rec / best_plain;
    out["goal"] = {{"recoverable_bfs_overhead", "<= 1.3"}};
    out["goal_met"] = best_rec / best_plain <= 1.3;
    out["depths_agree"] = agree;
    out["checked_against_reference"] = check;
    out["reached"] = last.reached;
    out["levels"] = last.level;
    out["segments"] = last.segments;
    out["checkpoints"] = last.checkpoints;
    out["commits"] = last.commits;
    out["state_bytes_written"] = last.state_words_written * 4;
    out["runs"] = runs;
    std::printf("%s\n", out.dump().c_str());
    return agree ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recoverable_bfs_bench: %s\n", e.what());
    return 1;
  }
}
