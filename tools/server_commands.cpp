#include "server_commands.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "deepwell/common/error.hpp"
#include "deepwell/link/server_link.hpp"
#if DEEPWELL_HAVE_SERVER
#include <nlohmann/json.hpp>

#include "deepwell/server/config.hpp"
#include "deepwell/server/server.hpp"
#endif

namespace deepwell::tools {

namespace {

#if DEEPWELL_HAVE_SERVER
server::server* running = nullptr;
void on_signal(int) {
  if (running) running->stop();  // a write to a pipe: async-signal-safe
}

int run_serve(server_commands& s) {
  server::server_config cfg;
  try {
    cfg = server::load_config(s.config);
    if (!s.socket.empty()) cfg.socket_path = s.socket;
    if (!s.metrics.empty()) cfg.metrics = s.metrics;
  } catch (const error& e) {
    std::fprintf(stderr, "deepwell serve: %s\n", e.what());
    return server::exit_code::config;
  }
  if (const std::vector<std::string> w = server::widening_grants(cfg); !w.empty()) {
    for (const std::string& line : w) std::fprintf(stderr, "deepwell serve: %s\n", line.c_str());
    return server::exit_code::config;
  }
  if (s.check_only) {
    std::printf("%s: %zu dataset(s), %zu grant(s), %zu share(s); socket %s\n", cfg.source.c_str(), cfg.datasets.size(),
                cfg.grants.size(), cfg.shares.size(), cfg.socket_path.c_str());
    return server::exit_code::ok;
  }
  try {
    server::server srv(std::move(cfg));
    running = &srv;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    srv.run();
    running = nullptr;
  } catch (const std::exception& e) {
    running = nullptr;
    std::fprintf(stderr, "deepwell serve: %s\n", e.what());
    return server::exit_code::runtime;
  }
  return server::exit_code::ok;
}

int run_stat(server_commands& s) {
  const std::string path = !s.socket.empty() ? s.socket : !server_from_env().empty() ? server_from_env()
                                                                                     : server::default_socket_path();
  try {
    auto link = server_link::connect(path, "deepwell stat");
    const std::string text = link->stats();
    if (s.json) {
      std::printf("%s\n", text.c_str());
      return 0;
    }
    const auto j = nlohmann::json::parse(text);
    const auto& sv = j["server"];
    std::printf("server %s: up %.0f s, %s, %d poller(s), %llu queue pair(s), %llu commands, %.1f MiB read, %.1f MiB "
                "written, %llu errors\n",
                sv["socket"].get<std::string>().c_str(), sv["uptime_s"].get<double>(),
                sv["backend"].get<std::string>().c_str(), sv["pollers"].get<int>(),
                (unsigned long long)sv["queue_pairs"].get<uint64_t>(), (unsigned long long)sv["commands"].get<uint64_t>(),
                sv["bytes_read"].get<double>() / (1 << 20), sv["bytes_written"].get<double>() / (1 << 20),
                (unsigned long long)sv["errors"].get<uint64_t>());
    // Text columns as wide as their longest entry (a file target's path is
    // long: cut, it named no file); the target, the longest, comes last.
    int name_w = 7, client_w = 6;
    for (const auto& d : j["datasets"]) name_w = std::max(name_w, int(d["name"].get<std::string>().size()));
    if (j.contains("trees"))
      for (const auto& t : j["trees"]) name_w = std::max(name_w, int(t["name"].get<std::string>().size()));
    for (const auto& c : j["clients"]) client_w = std::max(client_w, int(c["name"].get<std::string>().size()));
    std::printf("\n%-5s %-*s %14s %4s  %s\n", "nsid", name_w, "dataset", "bytes", "mode", "target");
    for (const auto& d : j["datasets"])
      std::printf("%-5u %-*s %14llu %4s  %s\n", d["nsid"].get<unsigned>(), name_w,
                  d["name"].get<std::string>().c_str(), (unsigned long long)d["bytes"].get<uint64_t>(),
                  d["writable"].get<bool>() ? "rw" : "r", d["target"].get<std::string>().c_str());
    if (j.contains("trees") && !j["trees"].empty()) {
      std::printf("\n%-*s %4s  %s\n", name_w, "tree", "mode", "root (the file API's files beneath it)");
      for (const auto& t : j["trees"])
        std::printf("%-*s %4s  %s\n", name_w, t["name"].get<std::string>().c_str(), t["writable"].get<bool>() ? "rw" : "r",
                    t["root"].get<std::string>().c_str());
    }
    std::printf("\n%-4s %-*s %6s %7s %4s %10s %10s %10s %7s %9s %9s %9s\n", "id", client_w, "client", "uid", "pid",
                "qps", "commands", "MiB read", "MiB wrtn", "errors", "throttled", "p50 us", "p99 us");
    for (const auto& c : j["clients"])
      std::printf("%-4u %-*s %6u %7d %4zu %10llu %10.1f %10.1f %7llu %9llu %9.0f %9.0f\n", c["id"].get<unsigned>(),
                  client_w, c["name"].get<std::string>().c_str(), c["uid"].get<unsigned>(), c["pid"].get<int>(),
                  c["queue_pairs"].get<size_t>(), (unsigned long long)c["commands"].get<uint64_t>(),
                  c["bytes_read"].get<double>() / (1 << 20), c["bytes_written"].get<double>() / (1 << 20),
                  (unsigned long long)c["errors"].get<uint64_t>(), (unsigned long long)c["throttled"].get<uint64_t>(),
                  c["latency_us_p50"].get<double>(), c["latency_us_p99"].get<double>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell stat: %s\n", e.what());
    return 1;
  }
  return 0;
}
#endif

}  // namespace

void add_command(CLI::App& app, server_commands& s) {
  s.serve = app.add_subcommand("serve", "run the deepwell server: one controller shared by many programs "
                                        "(docs/server.md)");
  s.serve->add_option("--config", s.config, "the datasets, grants and shares (TOML)")->required();
  s.serve->add_flag("--check-config", s.check_only, "check the configuration and exit (0: good, 2: not)");
  s.serve->add_option("--socket", s.socket, "listen here (overrides the config's server.socket)");
  s.serve->add_option("--metrics", s.metrics, "Prometheus endpoint HOST:PORT (overrides server.metrics)");
  s.stat = app.add_subcommand("stat", "a running server's clients, datasets and counters");
  s.stat->add_option("--socket", s.socket, "the server's socket (default: $DEEPWELL_SERVER, else the default path)");
  s.stat->add_flag("--json", s.json, "print the server's JSON");
}

bool server_commands::parsed() const { return serve->parsed() || stat->parsed(); }

int server_commands::run() {
#if DEEPWELL_HAVE_SERVER
  return serve->parsed() ? run_serve(*this) : run_stat(*this);
#else
  std::fprintf(stderr, "deepwell: this build has no server (it needs toml++: apt install libtomlplusplus-dev)\n");
  return 1;
#endif
}

}  // namespace deepwell::tools
