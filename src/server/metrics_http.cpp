#include "metrics_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "deepwell/error.hpp"
#include "server_log.hpp"

namespace deepwell::server {

metrics_http::metrics_http(const std::string& address, std::function<std::string()> body) : body_(std::move(body)) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) throw error("metrics address '" + address + "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw error("metrics address '" + address + "': '" + host + "' is not an IPv4 address");
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw error("metrics address '" + address + "': bad port");
  a.sin_port = htons(uint16_t(port));
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw error(errno_message("metrics socket", errno));
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 16) != 0) {
    const int e = errno;
    close(fd_);
    throw error(errno_message("metrics endpoint " + address, e));
  }
  socklen_t len = sizeof a;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    close(fd_);
    throw error(errno_message("pipe", errno));
  }
  thread_ = std::thread([this] { run(); });
}

metrics_http::~metrics_http() {
  (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  close(fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void metrics_http::run() {
  pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  for (;;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    try {
      answer(conn);
    } catch (const std::exception& e) {
      log_line(std::string("metrics: ") + e.what());
    }
    close(conn);
  }
}

void metrics_http::answer(int conn) {
  // Read the request head (up to a blank line, 8 KiB, or one second).
  timeval tv{1, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string req;
  char buf[1024];
  while (req.size() < 8192 && req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
    const ssize_t n = recv(conn, buf, sizeof buf, 0);
    if (n <= 0) break;
    req.append(buf, size_t(n));
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (req.rfind("GET /metrics ", 0) == 0 || req.rfind("GET / ", 0) == 0) {
    body = body_();
  } else {
    status = "404 Not Found";
    type = "text/plain";
    body = "deepwell: GET /metrics\n";
  }
  const std::string head = "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  const std::string all = head + body;
  size_t sent = 0;
  while (sent < all.size()) {
    const ssize_t n = send(conn, all.data() + sent, all.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
}

}  // namespace deepwell::server
