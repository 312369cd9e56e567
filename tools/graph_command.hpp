// `deepwell graph`: graphs stored as .dwg CSR files (docs/graphs.md):
// generate, convert, symmetrize and info, and the algorithms (bfs, cc,
// pagerank, sssp) on GPU clients or CPU threads (graph_dispatch.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "deepwell/graph/build.hpp"
#include "graph_options.hpp"

namespace deepwell::tools {

struct graph_command {
  CLI::App *app = nullptr, *gen = nullptr, *conv = nullptr, *sym = nullptr, *info = nullptr;
  std::vector<CLI::App*> algos;
  // generate, convert, symmetrize, info
  graph::generator_options go;
  graph::build_options bo;
  std::string out, input, format = "auto";
  bool uniform = false, directed = false, quiet = false, deep = false;
  unsigned info_threads = 0;
  // the algorithms
  graph_run_options ro;
  std::string cache_size;
  bool parsed() const { return app && app->parsed(); }
  int run();
};

void add_command(CLI::App& app, graph_command& g);

}  // namespace deepwell::tools
