// `deepwell serve`: one trusted controller that many programs share. It
// owns the datasets (server_config), listens on a Unix socket, learns each
// client's uid and groups from the kernel (SO_PEERCRED, SO_PEERGROUPS),
// and gives it queue pairs (sealed memfds, one set per client) whose
// commands the controller checks against that client's grants and serves
// by its share of the I/O budget. A client that goes away has its queue
// pairs reclaimed; nothing a client sends can stop the server.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/server/config.hpp"

namespace deepwell {
class controller;
}

namespace deepwell::server {

class server {
 public:
  // Opens every dataset, starts the controller and binds the socket.
  // Throws deepwell::error naming the problem: a dataset that cannot be
  // opened, a socket path where another server listens or that is not a
  // socket (a stale socket left by a server that died is replaced).
  explicit server(server_config cfg);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Serves clients until stop(); then stops the controller (outstanding
  // commands complete with an abort status, every queue is marked
  // stopped), closes the clients' connections and removes the socket.
  void run();
  // Safe from a signal handler and from any thread.
  void stop();

  const server_config& config() const;
  controller& ctl();
  // Connected clients now.
  uint32_t client_count() const;
  // Statistics as JSON (`deepwell stat`) and as Prometheus text (the
  // metrics endpoint): per client and per dataset.
  std::string stats_json() const;
  std::string prometheus() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// Exit codes of `deepwell serve` (docs/server.md).
namespace exit_code {
constexpr int ok = 0;          // stopped by SIGTERM or SIGINT
constexpr int runtime = 1;     // could not start (dataset, socket) or failed while serving
constexpr int config = 2;      // the configuration is malformed (or --check-config found a problem)
}  // namespace exit_code

}  // namespace deepwell::server
