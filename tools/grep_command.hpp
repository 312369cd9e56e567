// `deepwell grep`: whole-word counts of a dictionary over a tree of files,
// on the GPU through the file API (or CPU threads with --cpu).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace deepwell::tools {

struct grep_command {
  CLI::App* app = nullptr;
  std::string root, dict = "/usr/share/dict/words", out_dir = ".", out_name = "grep.out", json, server;
  bool cpu = false, check = false, fsync = false;
  unsigned workers = 0;
  uint64_t piece_bytes = 0;
  uint32_t service_threads = 0, service_slots = 0, blocks_per_sm = 0, page_size = 0;
  bool spin_wait = false;
  std::string sample_threads;
  bool profile_service = false;
  uint32_t reply_poll_ns = 0;
  bool parsed() const { return app && app->parsed(); }
  int run();
};

void add_command(CLI::App& app, grep_command& g);

}  // namespace deepwell::tools
