// `deepwell serve` and `deepwell stat`: the server's command line.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace deepwell::tools {

struct server_commands {
  CLI::App* serve = nullptr;
  CLI::App* stat = nullptr;
  std::string config, socket, metrics;
  bool check_only = false, json = false;
  // Whether one of them was asked for; then run() does it and says how the
  // process should exit (deepwell::server::exit_code).
  bool parsed() const;
  int run();
};

// Adds the subcommands (they say "not built" where the server is not).
void add_command(CLI::App& app, server_commands& s);

}  // namespace deepwell::tools
