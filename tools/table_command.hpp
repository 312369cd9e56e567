// `deepwell table`: the column store and BaM's taxi queries
// (docs/analytics.md): gen (a deterministic taxi-trip table), info (a
// column file's layout; --check: every block against its sum), query (Q0-Q5 on the GPU, or CPU threads with --cpu),
// profile (what the storage under a file can do: device_profile.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace deepwell::tools {

struct table_command {
  CLI::App *app = nullptr, *gen = nullptr, *info = nullptr, *query = nullptr, *profile = nullptr;
  std::string path, json;
  uint64_t rows = 1 << 20, seed = 1, row_group_rows = 1 << 20;
  std::vector<int> queries;
  bool cpu = false, check = false, odirect = false, no_direct = false, page_gather = false;
  unsigned workers = 0, pollers = 0;
  std::string server;  // --server: a deepwell serve socket
  std::string cache = "", page = "";
  std::string route = "auto", device_profile;  // --route, --device-profile
  bool remeasure = false;
  bool parsed() const { return app && app->parsed(); }
  int run();
};

void add_command(CLI::App& app, table_command& t);

}  // namespace deepwell::tools
