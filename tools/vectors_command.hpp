// `deepwell vectors`: vector search on storage (docs/vectors.md): gen (a
// deterministic clustered set in DiskANN's .bin layout), build (an index),
// truth (exact neighbours, DiskANN's truth-set layout), search (a batch of
// queries on the GPU, or CPU threads with --cpu; recall against a truth
// set), info (an index's header; --check: every block against its sum).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/data.hpp"
#include "deepwell/vectors/search.hpp"

namespace deepwell::tools {

struct vectors_command {
  CLI::App *app = nullptr, *gen = nullptr, *build = nullptr, *truth = nullptr, *search = nullptr, *info = nullptr;
  std::string out, data, index, queries, truth_path, type, metric = "l2", json, cache, server, layout = "neighbourhoods";
  vectors::mixture_options mix;  // gen's options, bound as they are
  vectors::build_options shape;  // build's
  uint32_t k = 10, width = 4, repeat = 1;
  std::vector<uint32_t> lists;
  unsigned threads = 0;
  bool cpu = false, check = false, odirect = false, picked_only = false, all_mates = false;
  uint32_t entry_sample = vectors::search_options{}.entry_sample;
  bool parsed() const { return app && app->parsed(); }
  int run();
};

void add_command(CLI::App& app, vectors_command& v);

}  // namespace deepwell::tools
