// The metrics endpoint: a tiny HTTP/1.0 responder on a TCP address that
// answers GET /metrics (and GET /) with Prometheus text, on its own
// thread. Anything else gets 404. One poll() loop serves up to 64
// connections at once, all non-blocking, each with a deadline for reading
// its request and writing the answer, so a slow, silent or flooding peer
// cannot keep a scraper waiting.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace deepwell::server {

class metrics_http {
 public:
  // address: "HOST:PORT" (HOST: an IPv4 address or "localhost"; port 0
  // picks a free one, see port()). The figures name clients and datasets,
  // so HOST must be a loopback address unless allow_remote (the config's
  // metrics_remote) says otherwise. Throws deepwell::error if the address
  // is refused or it cannot listen.
  metrics_http(const std::string& address, std::function<std::string()> body, bool allow_remote = false);
  ~metrics_http();
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::function<std::string()> body_;
  std::thread thread_;
  void run();
  std::string answer(const std::string& head);
};

}  // namespace deepwell::server
