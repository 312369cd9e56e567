// `deepwell vectors` (vectors_command.hpp).
#include "vectors_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "deepwell/common/output_path.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/vectors.hpp"
#include "gpu_probe.hpp"
#include "json_lines.hpp"
#include "size_arg.hpp"
#include "vectors_gpu.hpp"

namespace deepwell::tools {
namespace {

using namespace deepwell::vectors;

vector_type parse_type(const std::string& name, const std::string& path) {
  if (name.empty()) return type_from_name(path);
  if (name == "float32" || name == "f32") return vector_type::f32;
  if (name == "float16" || name == "f16") return vector_type::f16;
  if (name == "uint8" || name == "u8") return vector_type::u8;
  throw error("--type '" + name + "': float32, float16 or uint8");
}
metric parse_metric(const std::string& name) {
  if (name == "l2") return metric::l2;
  if (name == "ip" || name == "inner_product") return metric::inner_product;
  throw error("--metric '" + name + "': l2 or ip");
}

// A set of queries as float32 rows, whatever the file's element type.
std::vector<float> read_queries(const std::string& path, const std::string& type, uint32_t dim, uint64_t& nq) {
  vector_file f(path, parse_type(type, path));
  if (f.set().dim != dim)
    throw error(path + ": queries of dimension " + std::to_string(f.set().dim) + " for an index of dimension " +
                std::to_string(dim));
  nq = f.set().count;
  std::vector<float> q(nq * dim);
  for (uint64_t i = 0; i < nq; ++i) row_as_float(f.set(), i, &q[i * dim]);
  f.check_whole();
  return q;
}

// DiskANN's truth-set layout: uint32 queries, uint32 k, ids, then distances.
void write_truth(const std::string& path, uint64_t nq, uint32_t k, const std::vector<uint32_t>& ids,
                 const std::vector<float>& d) {
  replacing_file out(path, ".partial");  // not a device or FIFO; a failed write leaves what was there
  const uint32_t head[2] = {uint32_t(nq), k};
  out.write(head, 8, 0);
  out.write(ids.data(), ids.size() * 4, 8);
  out.write(d.data(), d.size() * 4, 8 + ids.size() * 4);
  out.commit();
}
std::vector<uint32_t> read_truth(const std::string& path, uint64_t nq, uint32_t& k) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(path + ": cannot open the truth set");
  uint32_t head[2] = {0, 0};
  in.read(reinterpret_cast<char*>(head), 8);
  if (!in || head[0] != nq || head[1] == 0)
    throw error(path + ": a truth set for " + std::to_string(head[0]) + " queries (of " + std::to_string(nq) +
                " given), or not a truth set");
  k = head[1];
  // The layout's size (ids then distances, 4 bytes each) before anything
  // is allocated: a damaged k would otherwise ask for gigabytes, or read
  // the distances as ids.
  in.seekg(0, std::ios::end);
  const uint64_t bytes = uint64_t(in.tellg()), need = 8 + 8 * nq * uint64_t(k);
  if (bytes != need)
    throw error(path + ": a truth set of " + std::to_string(nq) + " queries x " + std::to_string(k) + " neighbours has " +
                std::to_string(need) + " bytes, this file " + std::to_string(bytes) + " (damaged or not a truth set)");
  in.seekg(8);
  std::vector<uint32_t> ids(nq * k);
  in.read(reinterpret_cast<char*>(ids.data()), std::streamsize(ids.size() * 4));
  if (!in) throw error(path + ": truncated truth set");
  return ids;
}

int gen(const vectors_command& v) {
  mixture_options o = v.mix;
  o.type = parse_type(v.type, v.out);
  if (o.count == 0 || o.count >= 0xFFFFFFFFull) throw error("--count: 1 to 2^32 - 2 vectors");
  replacing_file out(v.out, ".partial");  // not a device or FIFO; a failed write leaves what was there
  const uint32_t head[2] = {uint32_t(o.count), o.dim};
  out.write(head, 8, 0);
  uint64_t at = 8;
  for (uint64_t first = 0; first < o.count; first += 1 << 20) {
    const uint64_t n = std::min<uint64_t>(1 << 20, o.count - first);
    const std::vector<uint8_t> rows = generate_mixture(o, first, n);
    out.write(rows.data(), rows.size(), at);
    at += rows.size();
  }
  out.commit();
  std::printf("%s: %llu x %u %s vectors, %u clusters, seed %llu, stream %u\n", v.out.c_str(),
              (unsigned long long)o.count, o.dim, type_name(o.type), o.clusters, (unsigned long long)o.seed, o.stream);
  return 0;
}

int build(const vectors_command& v) {
  check_output_of(v.data, v.index);
  vector_file f(v.data, parse_type(v.type, v.data));
  build_options o = v.shape;
  o.threads = v.threads;
  o.progress = true;
  o.layout = v.layout == "rows" ? record_layout::by_row : record_layout::neighbourhoods;
  // On the GPU where there is one: the same file as on CPU threads, sooner.
  bool gpu = !v.cpu && no_gpu_reason().empty();
  const auto t = std::chrono::steady_clock::now();
  build_report r;
  try {
    r = gpu ? build_vectors_on_gpu(f.set(), parse_metric(v.metric), v.index, o)
            : build_index(f.set(), parse_metric(v.metric), v.index, o);
  } catch (const error& e) {
    // Too large for the GPU's memory: the CPU threads write the same file
    // (resuming after the phases the GPU finished).
    if (!gpu || std::string(e.what()).find("cudaErrorMemoryAllocation") == std::string::npos) throw;
    std::fprintf(stderr, "vectors build: the GPU ran out of memory (%s); building on CPU threads\n", e.what());
    gpu = false;
    r = build_index(f.set(), parse_metric(v.metric), v.index, o);
  }
  f.check_whole();  // vectors cut from the file under the build read as zeros: the index is not of the data
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  const std::string sharded = r.shards ? " in " + std::to_string(r.shards) + " shards" : "";
  std::printf("%s: %llu vectors, %llu edges, %u subspaces; on the %s%s, %.2f s (quantiser %.2f, graph %.2f, write %.2f)%s\n",
              v.index.c_str(), (unsigned long long)r.vectors, (unsigned long long)r.edges, r.pq_subspaces,
              gpu ? "GPU" : "CPU", sharded.c_str(), s,
              r.quantiser_seconds, r.graph_seconds, r.write_seconds,
              r.resumed_phases ? ("; resumed after " + std::to_string(r.resumed_phases) + " phases kept").c_str() : "");
  append_json(v.json, {{"command", "build"}, {"data", v.data}, {"index", v.index}, {"vectors", r.vectors},
                       {"edges", r.edges}, {"on", gpu ? "gpu" : "cpu"}, {"layout", v.layout}, {"degree", o.degree}, {"list", o.list}, {"alpha", o.alpha},
                       {"passes", o.passes}, {"pq_subspaces", r.pq_subspaces}, {"shards", r.shards}, {"seconds", s},
                       {"quantiser_seconds", r.quantiser_seconds}, {"graph_seconds", r.graph_seconds},
                       {"write_seconds", r.write_seconds}, {"first_graph_seconds", r.first_graph_seconds},
                       {"passes_seconds", r.passes_seconds}, {"layout_seconds", r.layout_seconds},
                       {"state_seconds", r.state_seconds}, {"redone_nodes", r.redone_nodes},
                       {"resumed_phases", r.resumed_phases}});
  return 0;
}

int truth(const vectors_command& v) {
  vector_file f(v.data, parse_type(v.type, v.data));
  uint64_t nq = 0;
  const std::vector<float> q = read_queries(v.queries, "", f.set().dim, nq);
  std::vector<uint32_t> ids(nq * v.k);
  std::vector<float> d(nq * v.k);
  exact_neighbours(f.set(), q.data(), nq, v.k, parse_metric(v.metric), ids.data(), d.data(), v.threads);
  f.check_whole();
  write_truth(v.out, nq, v.k, ids, d);
  std::printf("%s: the %u nearest of %llu queries\n", v.out.c_str(), v.k, (unsigned long long)nq);
  return 0;
}

int info(const vectors_command& v) {
  const index_file f(v.index);
  const index_header& h = f.header();
  std::printf("%s: %llu x %u %s vectors, metric %s\n", v.index.c_str(), (unsigned long long)h.count, h.dim,
              type_name(h.type), metric_name(h.distance));
  std::printf("  records: %u-byte records, %u a %u-byte page, degree %u; %llu bytes\n", h.record_bytes,
              h.records_per_page, h.page_bytes, h.degree, (unsigned long long)h.records_bytes);
  std::printf("  quantiser: %u subspaces of %u dims (codes %llu bytes); entry node %llu\n", h.pq_subspaces,
              h.pq_sub_dim, (unsigned long long)h.codes_bytes, (unsigned long long)h.entry);
  if (v.check) {
    f.verify(v.threads);
    std::printf("  every block matches its checksum\n");
  }
  return 0;
}

int search(const vectors_command& v) {
  if (!v.cpu) require_gpu("", "--cpu");
  // The index is read over the link only (under --server, a dataset this
  // user may be granted without access to the file): its header first, for
  // the cache's page.
  std::shared_ptr<controller_link> link =
      v.server.empty() ? embedded_link() : std::shared_ptr<controller_link>(server_link::connect(v.server, "deepwell vectors"));
  index_open_options oo;
  oo.direct_io = v.odirect;
  cache_config cc;
  cc.page_size = read_index_header(link, v.index, oo).page_bytes;
  if (!v.cache.empty()) cc.capacity_bytes = parse_size_arg(v.cache, "--cache");
  const auto cache = v.cpu ? make_host_page_cache(link, cc) : make_vectors_gpu_cache(link, cc);
  const vector_index index(cache, v.index, oo);
  const index_header& h = index.header();
  uint64_t nq = 0;
  const std::vector<float> q = read_queries(v.queries, v.type, h.dim, nq);
  uint32_t truth_k = 0;
  std::vector<uint32_t> truth;
  if (!v.truth_path.empty()) {
    truth = read_truth(v.truth_path, nq, truth_k);
    if (truth_k < v.k) throw error(v.truth_path + ": holds " + std::to_string(truth_k) + " neighbours a query; --k is " +
                                   std::to_string(v.k));
  }
  std::unique_ptr<vectors_gpu_search> gpu;
  if (!v.cpu) gpu = std::make_unique<vectors_gpu_search>(index);
  const std::vector<uint32_t> lists = v.lists.empty() ? std::vector<uint32_t>{64} : v.lists;
  std::vector<uint32_t> ids;
  std::vector<float> d;
  for (const uint32_t list : lists) {
    search_options o;
    o.k = v.k;
    o.list = std::max(list, v.k);
    o.width = v.width;
    o.whole_pages = !v.picked_only;
    o.all_mates = v.all_mates;
    o.entry_sample = v.entry_sample;
    ids.assign(nq * o.k, 0);
    d.assign(nq * o.k, 0);
    std::vector<double> seconds;
    search_counts c;
    cache_stats cs;
    for (uint32_t r = 0; r < std::max(1u, v.repeat); ++r) {
      cache->reset_stats();
      const auto t = std::chrono::steady_clock::now();
      c = gpu ? gpu->search(q.data(), nq, o, ids.data(), d.data())
              : index.search(q.data(), nq, o, ids.data(), d.data(), v.threads);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
      if (r == 0) cs = cache->stats();  // the first run's: the cold one where the page cache was dropped
    }
    const double first = seconds.front(), best = *std::min_element(seconds.begin(), seconds.end());
    const double recall = truth.empty() ? -1 : recall_at(o.k, ids.data(), o.k, truth.data(), truth_k, nq);
    std::printf("list %4u: %10.0f queries/s (first run %.0f)%s, %.1f fetches a query (%.1f nodes expanded)\n", o.list,
                double(nq) / best, double(nq) / first,
                truth.empty() ? "" : (", recall@" + std::to_string(o.k) + " " + std::to_string(recall)).c_str(),
                double(c.fetches) / double(nq), double(c.expansions) / double(nq));
    append_json(v.json, {{"command", "search"}, {"index", v.index}, {"queries", nq}, {"client", v.cpu ? "cpu" : "gpu"},
                         {"k", o.k}, {"list", o.list}, {"width", o.width}, {"whole_pages", o.whole_pages}, {"all_mates", o.all_mates}, {"entry_sample", o.entry_sample}, {"cache_bytes", cache->slots() * uint64_t(cache->page_size())},
                         {"records_bytes", h.records_bytes}, {"seconds", seconds}, {"qps", double(nq) / best},
                         {"qps_first", double(nq) / first},
                         {"recall", truth.empty() ? nlohmann::json(nullptr) : nlohmann::json(recall)},
                         {"expansions_per_query", double(c.expansions) / double(nq)},
                         {"fetches_per_query", double(c.fetches) / double(nq)},
                         {"page_mates_per_query", double(c.page_mates) / double(nq)},
                         {"distances_per_query", double(c.distances) / double(nq)}, {"bad_ids", c.bad_ids},
                         {"first_run_cache", {{"hits", cs.hits}, {"misses", cs.misses}, {"bytes_read", cs.bytes_read},
                                              {"misses_per_query", double(cs.misses) / double(nq)}}},
                         {"server", !v.server.empty()}});
  }
  return 0;
}

}  // namespace

void add_command(CLI::App& app, vectors_command& v) {
  v.app = app.add_subcommand("vectors", "vector search over vectors on storage (docs/vectors.md)");
  v.app->require_subcommand(1);
  // Options several subcommands share.
  auto type = [&](CLI::App* a, const char* whose) {
    a->add_option("--type", v.type, std::string(whose) + " element type: float32, float16 or uint8 (default: from the name)");
  };
  auto threads = [&](CLI::App* a, const char* what) { a->add_option("--threads", v.threads, std::string(what) + " (0: every core)"); };
  auto metric = [&](CLI::App* a) { a->add_option("--metric", v.metric, "l2 or ip"); };
  auto path = [&](CLI::App* a, const char* name, std::string& into, const char* what) {
    a->add_option(name, into, what)->required();
  };

  v.gen = v.app->add_subcommand("gen", "write a deterministic clustered vector set (DiskANN's .bin layout)");
  path(v.gen, "out", v.out, "the file (.fbin float32, .hbin float16, .u8bin uint8)");
  v.gen->add_option("--count", v.mix.count, "vectors")->required()->check(not_negative);
  v.gen->add_option("--dim", v.mix.dim, "dimensions")->check(CLI::Range(1u, max_dim));
  v.gen->add_option("--clusters", v.mix.clusters, "clusters of the mixture")->check(CLI::Range(1u, 1u << 20));
  v.gen->add_option("--spread", v.mix.spread, "the noise around each centre")->check(CLI::Range(0.0f, 100.0f));
  v.gen->add_option("--latent", v.mix.latent, "directions of each cluster's noise (0: every dimension alike)")
      ->check(CLI::Range(0u, 64u));
  v.gen->add_option("--seed", v.mix.seed, "seed of the centres and the set")->check(not_negative);
  v.gen->add_option("--stream", v.mix.stream, "0: the base set; another: an independent set around the same centres");
  type(v.gen, "the file's");

  v.build = v.app->add_subcommand("build", "build an index of a vector set");
  path(v.build, "data", v.data, "the vectors (.fbin, .hbin, .u8bin)");
  path(v.build, "index", v.index, "the index to write (.dwv)");
  v.build->add_option("--degree", v.shape.degree, "neighbours a node at most")->check(CLI::Range(1u, max_degree));
  v.build->add_option("--list", v.shape.list, "the build's search list")->check(CLI::Range(1u, 4096u));
  v.build->add_option("--alpha", v.shape.alpha, "RobustPrune's alpha")->check(CLI::Range(1.0f, 4.0f));
  v.build->add_option("--passes", v.shape.passes, "Vamana passes after the first graph")->check(CLI::Range(0u, 8u));
  v.build->add_option("--subspaces", v.shape.pq_subspaces, "quantiser subspaces (0: dim / 4, dim / 2 for ip, where it divides; at most 64)");
  v.build->add_option("--shard-vectors", v.shape.shard_vectors,
                      "build the graph in overlapping shards of at most this many vectors, merged (0: at once on CPU "
                      "threads; on the GPU, shards where the set does not fit its memory)")
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 32));
  v.build->add_option("--json", v.json, "append the build's record to this file")->check(appendable);
  type(v.build, "the vectors'");
  v.build->add_option("--layout", v.layout, "records in pages: neighbourhoods (a node and its neighbours a page) or rows")
      ->check(CLI::IsMember({"neighbourhoods", "rows"}));
  v.build->add_flag("--cpu", v.cpu, "build on CPU threads even where there is a GPU (the same file either way)");
  metric(v.build);
  threads(v.build, "threads");

  v.truth = v.app->add_subcommand("truth", "the exact nearest neighbours of queries (DiskANN's truth-set layout)");
  path(v.truth, "data", v.data, "the vectors");
  path(v.truth, "queries", v.queries, "the queries");
  path(v.truth, "out", v.out, "the truth set to write");
  v.truth->add_option("--k", v.k, "neighbours a query")->check(CLI::Range(1u, 10000u));
  type(v.truth, "the vectors'");
  metric(v.truth);
  threads(v.truth, "threads");

  v.search = v.app->add_subcommand("search", "search a batch of queries on the GPU (or CPU threads with --cpu)");
  path(v.search, "index", v.index, "the index (.dwv)");
  path(v.search, "queries", v.queries, "the queries (.fbin, .hbin, .u8bin)");
  v.search->add_option("--k", v.k, "neighbours a query")->check(CLI::Range(1u, 1024u));
  v.search->add_option("--list", v.lists, "candidate list sizes (repeatable: a recall/speed curve; default 64)")
      ->check(CLI::Range(1u, 1024u));
  v.search->add_option("--width", v.width, "pages fetched a step (the beam)")->check(CLI::Range(1u, 32u));
  v.search->add_flag("--picked-only", v.picked_only,
                     "use only the picked record of each page fetched (default: every record in the page)");
  v.search->add_flag("--all-mates", v.all_mates,
                     "every record of a fetched page joins the list (default: those nearer the query than the picked one)")
      ->excludes("--picked-only");
  v.search->add_option("--entry-sample", v.entry_sample,
                       "start each query at the nearest (by code) of the entry node and this many nodes spread over "
                       "the index (0: the entry node)")
      ->check(CLI::Range(0u, vectors::max_entry_sample));
  v.search->add_option("--truth", v.truth_path, "a truth set: report recall@k");
  v.search->add_option("--cache", v.cache, "cache size (e.g. 256MiB; default the library's)");
  v.search->add_flag("--cpu", v.cpu, "CPU threads as clients (no GPU needed)");
  v.search->add_flag("--odirect", v.odirect, "read the index with O_DIRECT (past the page cache)");
  v.search->add_option("--repeat", v.repeat, "runs of each list (the best is reported)")->check(CLI::Range(1u, 100u));
  v.search->add_option("--server", v.server, "serve the misses from a `deepwell serve` at this socket");
  v.search->add_option("--json", v.json, "append a record a list size to this file")->check(appendable);
  type(v.search, "the queries'");
  threads(v.search, "CPU threads with --cpu");

  v.info = v.app->add_subcommand("info", "print an index's header");
  path(v.info, "index", v.index, "the index (.dwv)");
  v.info->add_flag("--check", v.check, "check every block against its checksum");
  threads(v.info, "threads for --check");
}

int vectors_command::run() {
  return errors_reported("deepwell vectors", [&] {
    if (gen->parsed()) return tools::gen(*this);
    if (build->parsed()) return tools::build(*this);
    if (truth->parsed()) return tools::truth(*this);
    if (info->parsed()) return tools::info(*this);
    return tools::search(*this);
  });
}

}  // namespace deepwell::tools
