// The wire protocol spoken by hand, for server tests that play a broken
// or hostile client (tests/cpu/test_server*.cpp).
#pragma once
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "deepwell/server/config.hpp"
#include "deepwell/server/server.hpp"
#include "protocol/wire.hpp"

namespace deepwell::test {

// A raw connection to the server's socket, or -1.
inline int raw_connect(const std::string& path) {
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// Sends one request without waiting for its reply.
inline bool raw_send(int s, wire::op o, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0, std::string text = {}) {
  wire::message m;
  m.h.op = uint16_t(o);
  m.h.a = a;
  m.h.b = b;
  m.h.c = c;
  m.text = std::move(text);
  return wire::send_message(s, std::move(m));
}

// A request and its reply (status -1 if the connection failed).
inline wire::message raw_call(int s, wire::op o, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0,
                              std::string text = {}) {
  wire::message r;
  if (!raw_send(s, o, a, b, c, std::move(text)) || !wire::receive_message(s, r)) r.h.status = -1;
  return r;
}

// A server of a TOML config, run on a thread of the test.
class server_thread {
 public:
  ~server_thread() { stop(); }
  void start(const std::string& toml, const std::string& source = "test.toml") {
    stop();
    srv_ = std::make_unique<server::server>(server::parse_config(toml, source));
    loop_ = std::thread([this] { srv_->run(); });
  }
  void stop() {
    if (!srv_) return;
    srv_->stop();
    if (loop_.joinable()) loop_.join();
    srv_.reset();
  }
  server::server* get() const { return srv_.get(); }

 private:
  std::unique_ptr<server::server> srv_;
  std::thread loop_;
};

}  // namespace deepwell::test
