#include "metrics_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <vector>

#include "deepwell/common/error.hpp"
#include "server_log.hpp"

namespace deepwell::server {

namespace {

using clock = std::chrono::steady_clock;

// From accept to the last byte of the answer: a scrape of a local server
// takes milliseconds, so anything slower is a stuck or hostile peer.
constexpr auto connection_deadline = std::chrono::seconds(2);
// Connections served at once. Past this, a new connection pushes out the
// oldest, so idle connections cannot lock out the next scraper.
constexpr size_t max_connections = 64;
// A GET with a few headers is a few hundred bytes.
constexpr size_t max_head = 8192;
// When accept fails for want of descriptors, the pending connection stays
// queued and the listener stays readable: stop watching it for a while
// rather than spin.
constexpr auto accept_backoff = std::chrono::milliseconds(100);
constexpr auto log_interval = std::chrono::seconds(1);

struct connection {
  enum class phase { reading, writing, draining };
  int fd = -1;
  clock::time_point deadline;
  phase state = phase::reading;
  std::string data;  // the request head while reading, the answer while writing
  size_t sent = 0;
};

// The length of the request head through its blank line, or npos while
// the blank line has not come.
size_t head_length(const std::string& s) {
  const size_t crlf = s.find("\r\n\r\n"), lf = s.find("\n\n");
  return std::min(crlf == std::string::npos ? crlf : crlf + 4, lf == std::string::npos ? lf : lf + 2);
}

// Logs at most one line per log_interval, counting the ones it held back,
// so a persistent failure cannot flood the journal.
class rate_limited_log {
 public:
  void operator()(const std::string& line) {
    const auto now = clock::now();
    if (last_ != clock::time_point{} && now - last_ < log_interval) {
      ++held_;
      return;
    }
    log_line(held_ ? line + " (and " + std::to_string(held_) + " more like it)" : line);
    last_ = now;
    held_ = 0;
  }

 private:
  clock::time_point last_{};
  uint64_t held_ = 0;
};

}  // namespace

metrics_http::metrics_http(const std::string& address, std::function<std::string()> body, bool allow_remote)
    : body_(std::move(body)) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) throw error("metrics address '" + address + "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw error("metrics address '" + address + "': '" + host + "' is not an IPv4 address");
  if (!allow_remote && (ntohl(a.sin_addr.s_addr) >> 24) != 127)
    throw error("metrics address '" + address +
                "': the metrics endpoint shows per-client and per-dataset figures, so it only listens on loopback "
                "(127.0.0.0/8 or localhost) unless the config sets metrics_remote = true");
  const std::string port_text = address.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
    throw error("metrics address '" + address + "': bad port");
  a.sin_port = htons(uint16_t(port));
  // Non-blocking: a connection reset between poll and accept must not
  // leave the loop stuck in accept.
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw error(errno_message("metrics socket", errno));
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, int(max_connections)) != 0) {
    const int e = errno;
    close(fd_);
    throw error(errno_message("metrics endpoint " + address, e));
  }
  socklen_t len = sizeof a;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    const int e = errno;
    close(fd_);
    throw error(errno_message("pipe", e));
  }
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    close(fd_);
    close(wake_[0]);
    close(wake_[1]);
    throw;
  }
}

metrics_http::~metrics_http() {
  (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  close(fd_);
  close(wake_[0]);
  close(wake_[1]);
}

std::string metrics_http::answer(const std::string& head) {
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (head.rfind("GET /metrics ", 0) == 0 || head.rfind("GET / ", 0) == 0) {
    body = body_();
  } else {
    status = "404 Not Found";
    type = "text/plain";
    body = "deepwell: GET /metrics\n";
  }
  return "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

void metrics_http::run() {
  std::vector<connection> conns;  // in accept order, so the front is the oldest
  std::vector<pollfd> p;
  rate_limited_log accept_log, poll_log;
  clock::time_point listen_again{};  // while in the future, the listener is not watched

  const auto drop = [&](size_t i) {
    close(conns[i].fd);
    conns.erase(conns.begin() + ptrdiff_t(i));
  };

  // Moves connection c on as far as it can go without blocking; false
  // when it is finished (answered, failed, or gone) and should be closed.
  const auto step = [&](connection& c) -> bool {
    char buf[4096];
    if (c.state == connection::phase::reading) {
      bool eof = false;
      for (;;) {
        const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
          c.data.append(buf, size_t(n));
          const size_t head = head_length(c.data);
          if (head != std::string::npos ? head > max_head : c.data.size() > max_head) return false;
          if (head != std::string::npos) break;
          continue;
        }
        if (n == 0) {
          eof = true;
          break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return false;
      }
      // A peer that half-closes after a partial head still gets its answer.
      if (head_length(c.data) == std::string::npos && !(eof && !c.data.empty())) return !eof;
      try {
        c.data = answer(c.data);
      } catch (const std::exception& e) {
        log_line(std::string("metrics: ") + e.what());
        return false;
      }
      c.sent = 0;
      c.state = connection::phase::writing;
    }
    if (c.state == connection::phase::writing) {
      while (c.sent < c.data.size()) {
        const ssize_t n = send(c.fd, c.data.data() + c.sent, c.data.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
          c.sent += size_t(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        return false;
      }
      // Closing with unread request bytes in the socket would reset the
      // connection and could destroy the answer before the peer reads it:
      // send FIN, then wait for the peer's (within the same deadline).
      std::string().swap(c.data);
      shutdown(c.fd, SHUT_WR);
      c.state = connection::phase::draining;
    }
    for (;;) {
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  };

  // Takes what the backlog holds, up to a round of max_connections so a
  // flood of connects cannot keep the loop from the ones it has.
  const auto accept_all = [&] {
    for (size_t round = 0; round < max_connections; ++round) {
      const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK) return;
        if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: retrying at once fails the same way.
        accept_log(errno_message("metrics: accept (pausing " + std::to_string(accept_backoff.count()) + " ms)", e));
        listen_again = clock::now() + accept_backoff;
        return;
      }
      if (conns.size() >= max_connections) {
        // Push out the oldest, preferring one that is done or still
        // waiting for its request over one being answered.
        size_t victim = 0;
        for (size_t i = 0; i < conns.size(); ++i)
          if (conns[i].state != connection::phase::writing) {
            victim = i;
            break;
          }
        drop(victim);
      }
      connection c;
      c.fd = conn;
      c.deadline = clock::now() + connection_deadline;
      conns.push_back(std::move(c));
    }
  };

  for (;;) {
    auto now = clock::now();
    for (size_t i = 0; i < conns.size();)
      if (conns[i].deadline <= now)
        drop(i);
      else
        ++i;
    const bool listening = now >= listen_again;

    p.clear();
    p.push_back({wake_[0], POLLIN, 0});
    p.push_back({listening ? fd_ : -1, POLLIN, 0});  // a negative fd is skipped by poll
    clock::time_point wake_at = clock::time_point::max();
    if (!listening) wake_at = listen_again;
    for (const connection& c : conns) {
      p.push_back({c.fd, short(c.state == connection::phase::writing ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout = -1;
    if (wake_at != clock::time_point::max())
      timeout = int(std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count()));

    if (poll(p.data(), p.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      // ENOMEM: out of kernel memory for the moment; try again shortly.
      poll_log(errno_message("metrics: poll", errno));
      if (::poll(p.data(), 1, int(std::chrono::milliseconds(accept_backoff).count())) > 0) break;
      continue;
    }
    if (p[0].revents) break;

    // Connections first, by their pollfd (p[i + 2] is conns[i]), before
    // accepting changes conns.
    for (size_t i = conns.size(); i-- > 0;)
      if (p[i + 2].revents && !step(conns[i])) drop(i);
    if (p[1].revents) accept_all();
  }

  for (const connection& c : conns) close(c.fd);
}

}  // namespace deepwell::server
