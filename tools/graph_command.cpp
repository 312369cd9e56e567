// `deepwell graph` (graph_command.hpp).
#include "graph_command.hpp"

#include <cstdio>
#include <cstring>
#include <string>

#include "cli_checks.hpp"
#include "json_lines.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/graph/csr_file.hpp"
#include "gpu_probe.hpp"
#include "graph_dispatch.hpp"
#include "size_arg.hpp"

namespace deepwell::tools {

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
  const csr_stats s = f.stats(threads);  // the offsets and neighbours verified first
  std::printf("degree      mean %.2f, max %llu (node %llu), %llu nodes without edges, %llu self loops\n", s.mean_degree,
              (unsigned long long)s.max_degree, (unsigned long long)s.max_degree_node,
              (unsigned long long)s.zero_degree, (unsigned long long)s.self_loops);
  std::printf("page cache  %.1f%% resident\n", 100 * resident_fraction(path));
  std::printf("checksums   %s\n", f.checksummed() ? "CRC-32C a 4 KiB block (format version 2)"
                                                   : "none (version 1): corruption is not detected");
  if (deep) {
    progress p;
    // stats() verified the offsets and neighbours: the weights remain.
    if (f.verify(csr_section::weights, threads)) std::printf("check       every block matches its checksum\n");
    f.check(threads, &p);
    std::printf("check       every offset and id in range\n");
  }
}

}  // namespace

void add_command(CLI::App& app, graph_command& c) {
  CLI::App* g = c.app = app.add_subcommand("graph", "graphs stored as .dwg CSR files: make them and run algorithms on them");
  g->require_subcommand(1);

  // generate
  c.gen = g->add_subcommand("generate", "a Kronecker (R-MAT, Graph500 parameters) or uniform random graph");
  c.gen->add_option("--scale", c.go.scale, "2^scale nodes")->required();
  c.gen->add_option("--degree", c.go.degree, "generated edges per node (edge factor)")->capture_default_str();
  c.gen->add_option("--seed", c.go.seed, "random seed (same seed, same file)")->capture_default_str();
  c.gen->add_flag("--uniform", c.uniform, "uniform random instead of Kronecker");
  c.gen->add_flag("--weights", c.go.weighted, "uint32 weights 1..255 (for sssp)");
  c.gen->add_flag("--directed", c.directed, "store each generated edge in one direction only");
  c.gen->add_option("--id-bytes", c.go.id_bytes, "node id width, 4 or 8")->capture_default_str();
  c.gen->add_option("--threads", c.go.threads, "0: all cores");
  c.gen->add_option("-o,--output", c.out, "the .dwg file to write")->required();
  c.gen->add_flag("-q,--quiet", c.quiet, "no progress");

  // convert
  c.conv = g->add_subcommand("convert", "SNAP-style edge list or Matrix Market file to .dwg");
  c.conv->add_option("input", c.input, "the text file")->required()->check(CLI::ExistingFile);
  c.conv->add_option("-o,--output", c.out, "the .dwg file to write")->required();
  c.conv->add_option("--format", c.format, "auto, snap or mtx")->capture_default_str();
  c.conv->add_flag("--symmetrize", c.bo.symmetrize, "store both directions of every edge");
  c.conv->add_flag("--keep-self-loops", c.bo.keep_self_loops, "keep u->u edges");
  c.conv->add_option("--threads", c.bo.threads, "0: all cores");
  c.conv->add_flag("-q,--quiet", c.quiet, "no progress");

  // symmetrize
  c.sym = g->add_subcommand("symmetrize", "the undirected version of a .dwg graph");
  c.sym->add_option("input", c.input, "the .dwg file")->required()->check(CLI::ExistingFile);
  c.sym->add_option("-o,--output", c.out, "the .dwg file to write")->required();
  c.sym->add_flag("-q,--quiet", c.quiet, "no progress");

  // info
  c.info = g->add_subcommand("info", "header, degree statistics and page-cache residency of a .dwg file");
  c.info->add_option("input", c.input, "the .dwg file")->required();
  c.info->add_flag("--check", c.deep, "scan every offset and node id");
  c.info->add_option("--threads", c.info_threads, "0: all cores");

  // algorithms
  for (const char* name : {"bfs", "cc", "pagerank", "sssp"}) {
    CLI::App* a = g->add_subcommand(name, std::string(name) + " on the GPU (or CPU threads with --cpu)");
    a->add_option("input", c.ro.file, "the .dwg file")->required();
    a->add_option("--source", c.ro.source, "source node (bfs, sssp); default: the node of largest degree")
        ->check(not_negative)
        ->default_str("");  // -1 is "not given", not a default to show
    a->add_option("--mode", c.ro.mode, "deepwell, zerocopy (pinned host memory) or memory (all in GPU memory)")
        ->capture_default_str();
    a->add_flag("--baselines", c.ro.baselines, "run deepwell, zerocopy and memory in one process, with the H2D ceiling");
    a->add_option("--cache", c.cache_size, "deepwell cache size (e.g. 1G); default an eighth of the edge bytes");
    a->add_option("--page", c.ro.page_size, "cache page size (bytes, or 16K, 64KiB)")->capture_default_str()->transform(page_bytes);
    a->add_option("--location", c.ro.location, "pagecache (buffered file) or odirect")->capture_default_str();
    a->add_option("--tier", c.ro.tier, "direct (read resident files through their mapping) or controller")
        ->capture_default_str();
    a->add_flag("--offsets-in-cache", c.ro.offsets_in_cache, "read the offsets through deepwell too");
    a->add_flag("--no-checksums{false}", c.ro.checksums,
                "read the file without checking its block sums (trusted storage, or to measure what they cost)");
    a->add_flag("--top-down", c.ro.top_down_only, "BFS without bottom-up levels");
    a->add_option("--long-lists", c.ro.long_lists,
                  "lists longer than this many entries are cut into chunks all warps share (0: each list walked by "
                  "one warp)")
        ->capture_default_str()
        ->check(not_negative);
    a->add_flag("!--no-stream", c.ro.stream,
                "bottom-up BFS reads through cache pages even where it could read the direct tier in place");
    a->add_option("--pin-free-strides", c.ro.pin_free_strides,
                  "list runs of a cached page up to this many warp strides are read with no pin (0: pin every page)")
        ->capture_default_str();
    a->add_flag("--keep-cache", c.ro.keep_cache,
                "repeats start with the pages the last one left (default: the cache is cleared before each run)");
    a->add_option("--iterations", c.ro.iterations, "PageRank iterations")->capture_default_str();
    a->add_option("--pollers", c.ro.pollers, "controller threads (0: the library's default, DEEPWELL_POLLERS)");
    a->add_option("--server", c.ro.server,
                  "deepwell mode: serve the misses from a `deepwell serve` at this socket (the file must be a "
                  "dataset it grants you)");
    a->add_option("--repeat", c.ro.repeat, "runs of each mode")->capture_default_str();
    a->add_flag("--check", c.ro.check, "compare with the CPU reference (small graphs)");
    a->add_flag("--cold", c.ro.cold, "drop the file from the page cache first");
    a->add_flag("--cpu", c.ro.cpu, "CPU threads as clients (no GPU needed)");
    a->add_option("--threads", c.ro.threads, "CPU client threads with --cpu (0: all cores)");
    a->add_option("--json", c.ro.json, "append JSON lines here")->check(appendable);
    a->add_option("--commit", c.ro.commit, "commit recorded in the JSON");
    c.algos.push_back(a);
  }
}

int graph_command::run() {
  try {
    progress p(!quiet);
    if (gen->parsed() || conv->parsed()) check_output_of(gen->parsed() ? "" : input, out);  // before the work
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
      if (!cache_size.empty()) ro.cache_bytes = parse_size_arg(cache_size, "--cache");
      if (ro.location != "pagecache" && ro.location != "odirect")
        throw error("--location " + ro.location + " (pagecache or odirect)");
      if (ro.tier != "direct" && ro.tier != "controller") throw error("--tier " + ro.tier + " (direct or controller)");
      if (ro.repeat == 0) throw error("--repeat must be at least 1");
      if (ro.keep_cache && ro.cpu) throw error("--keep-cache is for GPU runs (CPU runs build a cache per repeat)");
      if (!ro.cpu) require_gpu();
      return ro.cpu ? run_graph_cpu(ro) : run_graph_gpu(ro);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace deepwell::tools
