// The metrics endpoint: a tiny HTTP/1.0 responder on a TCP address that
// answers GET /metrics (and GET /) with Prometheus text, on its own
// thread. Anything else gets 404; a slow or silent peer is cut off after
// a second, so scrapers cannot pile up.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace deepwell::server {

class metrics_http {
 public:
  // address: "HOST:PORT" (HOST: an IPv4 address or "localhost"; port 0
  // picks a free one, see port()). Throws deepwell::error if it cannot listen.
  metrics_http(const std::string& address, std::function<std::string()> body);
  ~metrics_http();
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::function<std::string()> body_;
  std::thread thread_;
  void run();
  void answer(int conn);
};

}  // namespace deepwell::server
