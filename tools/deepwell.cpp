// The deepwell command line.
//
//   deepwell settings            (every DEEPWELL_* knob: built-in and current value)
//   deepwell serve --config datasets.toml [--check-config] [--socket P] [--metrics HOST:PORT]
//   deepwell stat [--socket P] [--json]
//   deepwell graph generate --scale 20 --degree 16 [--uniform] [--weights] -o g.dwg
//   deepwell graph convert edges.txt|matrix.mtx [--symmetrize] -o g.dwg
//   deepwell graph symmetrize in.dwg -o out.dwg
//   deepwell graph info g.dwg [--check]
//   deepwell graph bfs|cc|pagerank|sssp g.dwg [--cache 1G] [--page 4096] [--location pagecache|odirect]
//                                          [--mode deepwell|zerocopy|memory] [--baselines] [--cpu] [--json F]
//   deepwell table gen|info|query ...   (table_command.hpp)
//   deepwell kv create|set|get|delete|info|check ...   (kv_command.hpp)
//   deepwell grep TREE [--cpu]          (grep_command.hpp)
//   deepwell --version
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_checks.hpp"
#include "deepwell_cli_version.hpp"  // generated at build time (cmake/cli_version.cmake)
#include "deepwell/defaults.hpp"
#include "deepwell/error.hpp"
#include "deepwell/graph/build.hpp"
#include "gpu_probe.hpp"
#include "graph_dispatch.hpp"
#include "graph_options.hpp"
#include "grep_command.hpp"
#include "kv_command.hpp"
#include "table_command.hpp"
#include "server_commands.hpp"
#include "settings_report.hpp"
#include "size_arg.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

void print_info(const std::string& path, bool deep, unsigned threads) {
  csr_file f(path);
  const csr_header& h = f.header();
  std::printf("file        %s (%.2f GiB)\n", path.c_str(), double(h.file_bytes) / (1 << 30));
  std::printf("origin      %s\n", std::string(h.origin, strnlen(h.origin, sizeof h.origin)).c_str());
  std::printf("nodes       %llu\nedges       %llu (directed entries)\n", (unsigned long long)h.nodes,
              (unsigned long long)h.edges);
  std::printf("ids         %u bytes\nweights     %s\n", h.id_bytes,
              h.weights == weight_type::none ? "none" : h.weights == weight_type::u32 ? "uint32" : "float32");
  std::printf("flags      %s%s%s\n", h.flags & csr_symmetric ? " symmetric" : " directed",
              h.flags & csr_sorted ? " sorted" : "", h.flags & csr_simple ? " simple" : "");
  std::printf("sections    offsets @%llu, neighbours @%llu (%.2f GiB)%s\n", (unsigned long long)h.offsets_at,
              (unsigned long long)h.neighbours_at, double(f.neighbours_bytes()) / (1 << 30),
              h.weights_at ? (", weights @" + std::to_string(h.weights_at)).c_str() : "");
  const csr_stats s = f.stats(threads);
  std::printf("degree      mean %.2f, max %llu (node %llu), %llu nodes without edges, %llu self loops\n", s.mean_degree,
              (unsigned long long)s.max_degree, (unsigned long long)s.max_degree_node,
              (unsigned long long)s.zero_degree, (unsigned long long)s.self_loops);
  std::printf("page cache  %.1f%% resident\n", 100 * tools::resident_fraction(path));
  std::printf("checksums   %s\n", f.checksummed() ? "CRC-32C a 4 KiB block (format version 2)"
                                                   : "none (version 1): corruption is not detected");
  if (deep) {
    progress p;
    if (f.verify(threads, &p)) std::printf("check       every block matches its checksum\n");
    f.check(threads, &p);
    std::printf("check       every offset and id in range\n");
  }
}

// "deepwell 0.1.0 (commit 1a2b3c4d5e; CUDA 12.8 runtime; server mode)".
std::string version_text() {
  std::string v = std::string("deepwell ") + DEEPWELL_CLI_VERSION + " (commit " + DEEPWELL_CLI_COMMIT + "; " +
                  tools::cuda_build_info();
#if DEEPWELL_HAVE_SERVER
  v += "; server mode";
#else
  v += "; no server mode (built without toml++)";
#endif
  return v + ")";
}

}  // namespace

int main(int argc, char** argv) {
  tools::remember_command_line(argc, argv);
  CLI::App app{"deepwell: GPU access to data far larger than GPU memory", "deepwell"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(), "the version, the commit it was built from, and whether CUDA is built in");
  // Every option's help shows its default (`table gen --help`: the rows).
  app.option_defaults()->always_capture_default();
  CLI::App* settings = app.add_subcommand("settings", "every DEEPWELL_* setting: its built-in default and the value "
                                                      "this environment gives it (docs/settings.md)");
  CLI::App* g = app.add_subcommand("graph", "graphs stored as .dwg CSR files: make them and run algorithms on them");
  g->require_subcommand(1);

  // generate
  generator_options go;
  std::string out;
  bool uniform = false, directed = false, quiet = false;
  CLI::App* gen = g->add_subcommand("generate", "a Kronecker (R-MAT, Graph500 parameters) or uniform random graph");
  gen->add_option("--scale", go.scale, "2^scale nodes")->required();
  gen->add_option("--degree", go.degree, "generated edges per node (edge factor)")->capture_default_str();
  gen->add_option("--seed", go.seed, "random seed (same seed, same file)")->capture_default_str();
  gen->add_flag("--uniform", uniform, "uniform random instead of Kronecker");
  gen->add_flag("--weights", go.weighted, "uint32 weights 1..255 (for sssp)");
  gen->add_flag("--directed", directed, "store each generated edge in one direction only");
  gen->add_option("--id-bytes", go.id_bytes, "node id width, 4 or 8")->capture_default_str();
  gen->add_option("--threads", go.threads, "0: all cores");
  gen->add_option("-o,--output", out, "the .dwg file to write")->required();
  gen->add_flag("-q,--quiet", quiet, "no progress");

  // convert
  std::string input, format = "auto";
  build_options bo;
  CLI::App* conv = g->add_subcommand("convert", "SNAP-style edge list or Matrix Market file to .dwg");
  conv->add_option("input", input, "the text file")->required()->check(CLI::ExistingFile);
  conv->add_option("-o,--output", out, "the .dwg file to write")->required();
  conv->add_option("--format", format, "auto, snap or mtx")->capture_default_str();
  conv->add_flag("--symmetrize", bo.symmetrize, "store both directions of every edge");
  conv->add_flag("--keep-self-loops", bo.keep_self_loops, "keep u->u edges");
  conv->add_option("--threads", bo.threads, "0: all cores");
  conv->add_flag("-q,--quiet", quiet, "no progress");

  // symmetrize
  CLI::App* sym = g->add_subcommand("symmetrize", "the undirected version of a .dwg graph");
  sym->add_option("input", input, "the .dwg file")->required()->check(CLI::ExistingFile);
  sym->add_option("-o,--output", out, "the .dwg file to write")->required();
  sym->add_flag("-q,--quiet", quiet, "no progress");

  // info
  bool deep = false;
  unsigned info_threads = 0;
  CLI::App* info = g->add_subcommand("info", "header, degree statistics and page-cache residency of a .dwg file");
  info->add_option("input", input, "the .dwg file")->required();
  info->add_flag("--check", deep, "scan every offset and node id");
  info->add_option("--threads", info_threads, "0: all cores");

  // algorithms
  tools::graph_run_options ro;
  std::string cache_size;
  std::vector<CLI::App*> algos;
  for (const char* name : {"bfs", "cc", "pagerank", "sssp"}) {
    CLI::App* a = g->add_subcommand(name, std::string(name) + " on the GPU (or CPU threads with --cpu)");
    a->add_option("input", ro.file, "the .dwg file")->required();
    a->add_option("--source", ro.source, "source node (bfs, sssp); default: the node of largest degree")
        ->check(deepwell::tools::not_negative)
        ->default_str("");  // -1 is "not given", not a default to show
    a->add_option("--mode", ro.mode, "deepwell, zerocopy (pinned host memory) or memory (all in GPU memory)")
        ->capture_default_str();
    a->add_flag("--baselines", ro.baselines, "run deepwell, zerocopy and memory in one process, with the H2D ceiling");
    a->add_option("--cache", cache_size, "deepwell cache size (e.g. 1G); default an eighth of the edge bytes");
    a->add_option("--page", ro.page_size, "cache page size in bytes")->capture_default_str();
    a->add_option("--location", ro.location, "pagecache (buffered file) or odirect")->capture_default_str();
    a->add_option("--tier", ro.tier, "direct (read resident files through their mapping) or controller")
        ->capture_default_str();
    a->add_flag("--offsets-in-cache", ro.offsets_in_cache, "read the offsets through deepwell too");
    a->add_flag("--no-checksums{false}", ro.checksums,
                "read the file without checking its block sums (trusted storage, or to measure what they cost)");
    a->add_flag("--top-down", ro.top_down_only, "BFS without bottom-up levels");
    a->add_option("--long-lists", ro.long_lists,
                  "lists longer than this many entries are cut into chunks all warps share (0: each list walked by "
                  "one warp)")
        ->capture_default_str()
        ->check(deepwell::tools::not_negative);
    a->add_flag("!--no-stream", ro.stream,
                "bottom-up BFS reads through cache pages even where it could read the direct tier in place");
    a->add_option("--pin-free-strides", ro.pin_free_strides,
                  "list runs of a cached page up to this many warp strides are read with no pin (0: pin every page)")
        ->capture_default_str();
    a->add_flag("--keep-cache", ro.keep_cache,
                "repeats start with the pages the last one left (default: the cache is cleared before each run)");
    a->add_option("--iterations", ro.iterations, "PageRank iterations")->capture_default_str();
    a->add_option("--pollers", ro.pollers, "controller threads (0: the library's default, DEEPWELL_POLLERS)");
    a->add_option("--server", ro.server,
                  "deepwell mode: serve the misses from a `deepwell serve` at this socket (the file must be a "
                  "dataset it grants you)");
    a->add_option("--repeat", ro.repeat, "runs of each mode")->capture_default_str();
    a->add_flag("--check", ro.check, "compare with the CPU reference (small graphs)");
    a->add_flag("--cold", ro.cold, "drop the file from the page cache first");
    a->add_flag("--cpu", ro.cpu, "CPU threads as clients (no GPU needed)");
    a->add_option("--threads", ro.threads, "CPU client threads with --cpu (0: all cores)");
    a->add_option("--json", ro.json, "append JSON lines here");
    a->add_option("--commit", ro.commit, "commit recorded in the JSON");
    algos.push_back(a);
  }

  tools::server_commands server_cmds;
  tools::add_server_commands(app, server_cmds);
  tools::grep_command grep_cmd;
  tools::add_grep_command(app, grep_cmd);
  tools::table_command table_cmd;
  tools::add_table_command(app, table_cmd);
  tools::kv_command kv_cmd;
  tools::add_kv_command(app, kv_cmd);

  if (const std::string problem = tools::subcommand_problem(app, argc, argv); !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    return 2;
  }
  CLI11_PARSE(app, argc, argv);
  if (server_cmds.parsed()) return server_cmds.run();
  if (grep_cmd.parsed()) return grep_cmd.run();
  if (table_cmd.parsed()) return table_cmd.run();
  if (kv_cmd.parsed()) return kv_cmd.run();
  try {
    if (settings->parsed()) {
      const std::vector<defaults::knob> knobs = defaults::knobs();  // throws, naming a bad variable
      std::printf("%-30s %-22s %-14s %s\n", "variable", "built-in", "value", "meaning");
      for (const defaults::knob& k : knobs)
        std::printf("%-30s %-22s %-14s %s\n", k.variable.c_str(), k.builtin.c_str(), k.value.c_str(),
                    k.meaning.c_str());
      deepwell::tools::report_unknown_variables(knobs);
      return 0;
    }
    progress p(!quiet);
    if (gen->parsed()) {
      go.kind = uniform ? generator_options::kind_t::uniform : generator_options::kind_t::kron;
      go.symmetric = !directed;
      const csr_graph gr = generate(go, &p);
      write_csr(out, gr, &p);
      std::printf("%s: %llu nodes, %llu edges (%s)\n", out.c_str(), (unsigned long long)gr.nodes,
                  (unsigned long long)gr.edges(), gr.origin.c_str());
    } else if (conv->parsed()) {
      const text_format tf = format == "snap"  ? text_format::snap
                             : format == "mtx" ? text_format::matrix_market
                             : format == "auto" ? text_format::automatic
                                                : throw error("--format " + format + " (auto, snap or mtx)");
      const csr_graph gr = build_csr(read_edge_list(input, tf, &p), bo, &p);
      write_csr(out, gr, &p);
      std::printf("%s: %llu nodes, %llu edges\n", out.c_str(), (unsigned long long)gr.nodes,
                  (unsigned long long)gr.edges());
    } else if (sym->parsed()) {
      const csr_file in(input);
      in.verify(0, &p);  // load() copies the mapping: its blocks checked first
      const csr_graph gr = symmetrize(in.load(), 0, &p);
      write_csr(out, gr, &p);
      std::printf("%s: %llu nodes, %llu edges\n", out.c_str(), (unsigned long long)gr.nodes,
                  (unsigned long long)gr.edges());
    } else if (info->parsed()) {
      print_info(input, deep, info_threads);
    } else {
      for (CLI::App* a : algos)
        if (a->parsed()) ro.algo = a->get_name();
      if (!cache_size.empty()) ro.cache_bytes = tools::parse_size_arg(cache_size, "--cache");
      if (ro.location != "pagecache" && ro.location != "odirect")
        throw error("--location " + ro.location + " (pagecache or odirect)");
      if (ro.tier != "direct" && ro.tier != "controller") throw error("--tier " + ro.tier + " (direct or controller)");
      if (ro.repeat == 0) throw error("--repeat must be at least 1");
      if (ro.keep_cache && ro.cpu) throw error("--keep-cache is for GPU runs (CPU runs build a cache per repeat)");
      if (!ro.cpu) tools::require_gpu();
      return ro.cpu ? tools::run_graph_cpu(ro) : tools::run_graph_gpu(ro);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell: %s\n", e.what());
    return 2;
  }
  return 0;
}
