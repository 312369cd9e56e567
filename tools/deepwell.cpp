// The deepwell command line.
//
//   deepwell settings            (every DEEPWELL_* knob: built-in and current value)
//   deepwell serve --config datasets.toml [--check-config] [--socket P] [--metrics HOST:PORT]
//   deepwell stat [--socket P] [--json]
//   deepwell graph generate|convert|symmetrize|info|bfs|cc|pagerank|sssp ...   (graph_command.hpp)
//   deepwell table gen|info|query ...   (table_command.hpp)
//   deepwell kv create|set|get|delete|info|check ...   (kv_command.hpp)
//   deepwell grep TREE [--cpu]          (grep_command.hpp)
//   deepwell vectors gen|build|truth|search|info ...   (vectors_command.hpp)
//   deepwell --version
#include <csignal>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli_checks.hpp"
#include "deepwell_cli_version.hpp"  // generated at build time (cmake/cli_version.cmake)
#include "deepwell/common/defaults.hpp"
#include "deepwell/common/error.hpp"
#include "gpu_probe.hpp"
#include "graph_command.hpp"
#include "grep_command.hpp"
#include "kv_command.hpp"
#include "table_command.hpp"
#include "vectors_command.hpp"
#include "server_commands.hpp"
#include "settings_report.hpp"

using namespace deepwell;

namespace {

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
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, which the
  // commands report by the file's name; SIGXFSZ's default killed them
  // without a word (exit 153).
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"deepwell: GPU access to data far larger than GPU memory", "deepwell"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(), "the version, the commit it was built from, and whether CUDA is built in");
  // Every option's help shows its default (`table gen --help`: the rows).
  app.option_defaults()->always_capture_default();
  CLI::App* settings = app.add_subcommand("settings", "every DEEPWELL_* setting: its built-in default and the value "
                                                      "this environment gives it (docs/settings.md)");
  // Every command group: registered in this order (--help lists them so); the one parsed runs.
  std::tuple<tools::graph_command, tools::server_commands, tools::grep_command, tools::table_command, tools::kv_command,
             tools::vectors_command>
      commands;
  std::apply([&](auto&... c) { (tools::add_command(app, c), ...); }, commands);

  if (const std::string problem = tools::subcommand_problem(app, argc, argv); !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    return 2;
  }
  CLI11_PARSE(app, argc, argv);
  // Every DEEPWELL_* setting checked before a command runs: a bad one is
  // named here, whichever command would have read it (DEEPWELL_LOG=loud was
  // ignored, and a kv command never read DEEPWELL_PAGE_SIZE=1000).
  if (!settings->parsed()) {
    try {
      (void)defaults::knobs();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepwell: %s\n", e.what());
      return 2;
    }
  }
  std::optional<int> rc;
  std::apply([&](auto&... c) { ((!rc && c.parsed() ? void(rc = c.run()) : void()), ...); }, commands);
  if (rc) return *rc;
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell: %s\n", e.what());
    return 2;
  }
  return 0;
}
