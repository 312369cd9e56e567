// The metrics endpoint (src/server/metrics_http) over real TCP on
// loopback: it answers GET /metrics and 404s the rest, and no client can
// keep a scraper waiting: not one that drips its request a byte at a time,
// not one that says nothing, not a hundred idle ones, not one that will
// not read its answer, not a server out of descriptors. Every client here
// is non-blocking with poll() deadlines, so a broken endpoint fails a test
// rather than hanging it.
#include <gtest/gtest.h>

#if defined(DEEPWELL_HAVE_SERVER)  // metrics_http lives in the server library

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../src/server/metrics_http.hpp"
#include "deepwell/common/error.hpp"

namespace {

using deepwell::server::metrics_http;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kBody = "# TYPE deepwell_up gauge\ndeepwell_up 1\n";

double ms_since(steady::time_point t0) {
  return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

int ms_until(steady::time_point t) {
  return int(std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(t - steady::now()).count()));
}

struct socket_fd {
  int fd = -1;
  socket_fd() = default;
  explicit socket_fd(int f) : fd(f) {}
  socket_fd(socket_fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  socket_fd& operator=(socket_fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~socket_fd() {
    if (fd >= 0) close(fd);
  }
};

// A non-blocking TCP connection to 127.0.0.1:port, or -1 if it did not
// connect within timeout.
int connect_to(uint16_t port, std::chrono::milliseconds timeout = 3000ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, int(timeout.count())) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of s before `until`; false if the peer failed or time ran out.
bool send_all(int fd, const std::string& s, steady::time_point until) {
  size_t sent = 0;
  while (sent < s.size()) {
    const ssize_t n = send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, ms_until(until)) != 1) return false;
  }
  return true;
}

struct received {
  bool closed = false;  // the server ended the connection (EOF or reset) before the time ran out
  bool reset = false;
  std::string text;
};

// Reads until the server closes fd, or until `until`.
received read_until_closed(int fd, steady::time_point until) {
  received r;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      r.text.append(buf, size_t(n));
      continue;
    }
    if (n == 0) {
      r.closed = true;
      return r;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      r.closed = r.reset = true;
      return r;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms_until(until)) != 1) return r;
  }
}

struct reply {
  bool complete = false;  // the whole answer came, and then EOF, within the limit
  int status = 0;
  std::string body;
  double ms = 0;
};

reply http_get(uint16_t port, const std::string& path, std::chrono::milliseconds limit) {
  reply out;
  const auto t0 = steady::now();
  const auto until = t0 + limit;
  socket_fd s(connect_to(port, limit));
  if (s.fd < 0) return out;
  if (!send_all(s.fd, "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n", until)) return out;
  const received r = read_until_closed(s.fd, until);
  out.ms = ms_since(t0);
  const size_t blank = r.text.find("\r\n\r\n");
  if (!r.closed || r.reset || r.text.rfind("HTTP/1.0 ", 0) != 0 || blank == std::string::npos) return out;
  out.status = std::atoi(r.text.c_str() + 9);
  out.body = r.text.substr(blank + 4);
  const size_t cl = r.text.find("Content-Length: ");
  out.complete = cl != std::string::npos && cl < blank &&
                 std::strtoull(r.text.c_str() + cl + 16, nullptr, 10) == out.body.size();
  return out;
}

struct cut_off {
  bool closed = false;
  bool answered = false;  // the server answered a request that never ended
  double after_ms = 0;    // from before connect to the close
};

// A client that opened its connection at t0 and sends one byte of a
// request head that never ends every `every` (or nothing, when every is
// zero), until the server closes the connection or `give_up` has passed.
cut_off drip(int fd, steady::time_point t0, std::chrono::milliseconds every, std::chrono::milliseconds give_up) {
  const std::string head = "GET /metrics HTTP/1.0\r\nX-Slow: ";
  cut_off out;
  size_t i = 0;
  auto next = steady::now();
  const auto end = t0 + give_up;
  while (steady::now() < end) {
    if (every.count() > 0 && steady::now() >= next) {
      const char c = i < head.size() ? head[i] : 'a';
      ++i;
      if (send(fd, &c, 1, MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        out.closed = true;
        out.after_ms = ms_since(t0);
        return out;
      }
      next += every;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms_until(every.count() > 0 ? std::min(next, end) : end)) != 1) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.answered = true;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      out.closed = true;
      out.after_ms = ms_since(t0);
      return out;
    }
  }
  return out;
}

TEST(MetricsHttp, GetMetricsAnswersWithTheBody) {
  metrics_http m("127.0.0.1:0", [] { return kBody; });
  ASSERT_NE(m.port(), 0);
  for (const char* path : {"/metrics", "/"}) {
    const reply r = http_get(m.port(), path, 2000ms);
    EXPECT_TRUE(r.complete) << path;
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.body, kBody) << path;
  }
}

TEST(MetricsHttp, OtherPathsGet404) {
  int calls = 0;  // read after the endpoint is gone
  auto m = std::make_unique<metrics_http>("127.0.0.1:0", [&calls] {
    ++calls;
    return kBody;
  });
  for (const char* path : {"/metric", "/metrics/x", "/favicon.ico"}) {
    const reply r = http_get(m->port(), path, 2000ms);
    EXPECT_TRUE(r.complete) << path;
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.body.find("deepwell_up"), std::string::npos) << path;
  }
  // Not GET at all.
  socket_fd s(connect_to(m->port()));
  ASSERT_GE(s.fd, 0);
  ASSERT_TRUE(send_all(s.fd, "POST /metrics HTTP/1.0\r\n\r\n", steady::now() + 1s));
  const received r = read_until_closed(s.fd, steady::now() + 2s);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.text.rfind("HTTP/1.0 404 ", 0), 0u) << r.text;
  m.reset();
  EXPECT_EQ(calls, 0);
}

TEST(MetricsHttp, SlowClientsDoNotDelayAScrapeAndAreCutOff) {
  metrics_http m("127.0.0.1:0", [] { return kBody; });
  // Three drip one byte every 0.5 s (each byte inside a 1 s receive
  // timeout, forever), one says nothing at all.
  std::vector<cut_off> cuts(4);
  std::vector<socket_fd> fds;
  std::vector<steady::time_point> opened;
  for (size_t k = 0; k < cuts.size(); ++k) {
    opened.push_back(steady::now());
    fds.emplace_back(connect_to(m.port()));
    ASSERT_GE(fds.back().fd, 0);
  }
  std::vector<std::thread> clients;
  for (size_t k = 0; k < cuts.size(); ++k)
    clients.emplace_back([&, k] { cuts[k] = drip(fds[k].fd, opened[k], k < 3 ? 500ms : 0ms, 5000ms); });
  std::this_thread::sleep_for(100ms);  // all four accepted and holding their connections
  for (int i = 0; i < 5; ++i) {
    const reply r = http_get(m.port(), "/metrics", 500ms);
    EXPECT_TRUE(r.complete) << "scrape " << i << " did not finish within 500 ms";
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, kBody);
    EXPECT_LT(r.ms, 500.0);
    std::this_thread::sleep_for(200ms);
  }
  for (auto& t : clients) t.join();
  for (size_t k = 0; k < cuts.size(); ++k) {
    EXPECT_TRUE(cuts[k].closed) << "client " << k << " still connected after 5 s";
    EXPECT_FALSE(cuts[k].answered) << "client " << k;
    // Held open until its deadline, 2 s from accept; no longer.
    EXPECT_GT(cuts[k].after_ms, 1500.0) << "client " << k;
    EXPECT_LT(cuts[k].after_ms, 2500.0) << "client " << k;
  }
}

TEST(MetricsHttp, AHundredIdleConnectionsDoNotBlockAScrape) {
  auto m = std::make_unique<metrics_http>("127.0.0.1:0", [] { return kBody; });
  const auto t0 = steady::now();
  std::vector<socket_fd> idle;
  for (int i = 0; i < 100; ++i) {
    idle.emplace_back(connect_to(m->port()));
    ASSERT_GE(idle.back().fd, 0) << "connection " << i;
  }
  std::this_thread::sleep_for(100ms);
  for (int i = 0; i < 3; ++i) {
    const reply r = http_get(m->port(), "/metrics", 1000ms);
    EXPECT_TRUE(r.complete) << "scrape " << i << " did not finish within 1 s";
    EXPECT_EQ(r.status, 200);
  }
  // At most 64 held at once: the rest were closed to make room.
  size_t closed = 0;
  for (const socket_fd& s : idle)
    if (read_until_closed(s.fd, steady::now()).closed) ++closed;
  EXPECT_GE(closed, 100u - 64u);
  ASSERT_LT(ms_since(t0), 1800.0) << "too slow to test the stop before the deadlines";
  // Stopping closes the rest at once, without waiting for their deadlines.
  const auto stop = steady::now();
  m.reset();
  EXPECT_LT(ms_since(stop), 500.0);
  for (const socket_fd& s : idle) EXPECT_TRUE(read_until_closed(s.fd, steady::now() + 100ms).closed);
}

TEST(MetricsHttp, AnOversizedHeadIsRefused) {
  metrics_http m("127.0.0.1:0", [] { return kBody; });
  socket_fd s(connect_to(m.port()));
  ASSERT_GE(s.fd, 0);
  const auto t0 = steady::now();
  const std::string head = "GET /metrics HTTP/1.0\r\nX-Big: " + std::string(9000, 'a');
  send_all(s.fd, head, t0 + 1s);  // may fail part way: the server closes as soon as it has 8 KiB
  const received r = read_until_closed(s.fd, t0 + 3s);
  EXPECT_TRUE(r.closed);
  EXPECT_LT(ms_since(t0), 1000.0) << "closed by the deadline, not for its size";
  EXPECT_EQ(r.text.find("HTTP/1.0"), std::string::npos);
}

TEST(MetricsHttp, AClientThatDoesNotReadItsAnswerDoesNotBlockOthers) {
  const std::string big(16 << 20, 'x');  // more than loopback socket buffers hold
  metrics_http m("127.0.0.1:0", [&big] { return big; });
  const auto t0 = steady::now();
  socket_fd stuck(connect_to(m.port()));
  ASSERT_GE(stuck.fd, 0);
  ASSERT_TRUE(send_all(stuck.fd, "GET /metrics HTTP/1.0\r\n\r\n", t0 + 1s));
  // Its answer is being written (and fills the buffers) once the first of
  // it arrives; building 16 MiB can take a while on a busy machine.
  pollfd p{stuck.fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 1500), 1);
  std::this_thread::sleep_for(50ms);
  // A short answer (the 404), so the time measures waiting, not copying
  // 16 MiB on a busy machine.
  for (int i = 0; i < 3; ++i) {
    const reply r = http_get(m.port(), "/other", 500ms);
    EXPECT_TRUE(r.complete) << "request took " << r.ms << " ms";
    EXPECT_EQ(r.status, 404);
  }
  // The stuck one is cut off at its deadline, 2 s from accept: reading
  // only after that, it finds what the kernel held and then the end, short
  // of the whole answer.
  std::this_thread::sleep_until(t0 + 2300ms);
  const received rest = read_until_closed(stuck.fd, t0 + 3s);
  EXPECT_TRUE(rest.closed);
  EXPECT_FALSE(rest.reset);
  EXPECT_EQ(rest.text.rfind("HTTP/1.0 200 ", 0), 0u);
  EXPECT_LT(rest.text.size(), big.size());
}

// The highest descriptor this process has open.
int highest_fd() {
  int highest = 2;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 1024;
  while (dirent* e = readdir(d)) highest = std::max(highest, std::atoi(e->d_name));
  closedir(d);
  return highest;
}

TEST(MetricsHttp, RunningOutOfDescriptorsDoesNotSpin) {
  metrics_http m("127.0.0.1:0", [] { return kBody; });
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  std::vector<int> fillers;
  struct restore {
    rlimit& lim;
    std::vector<int>& fds;
    ~restore() {
      for (int f : fds) close(f);
      fds.clear();
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  } guard{before, fillers};
  rlimit low = before;
  low.rlim_cur = rlim_t(highest_fd() + 16);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (;;) {
    const int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      ASSERT_EQ(errno, EMFILE);
      break;
    }
    fillers.push_back(f);
  }
  // One descriptor free, for the client: the server's accept gets EMFILE.
  ASSERT_FALSE(fillers.empty());
  close(fillers.back());
  fillers.pop_back();
  socket_fd client(connect_to(m.port()));
  ASSERT_GE(client.fd, 0);

  timespec c0{}, c1{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  std::this_thread::sleep_for(1s);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  const double cpu_s = double(c1.tv_sec - c0.tv_sec) + double(c1.tv_nsec - c0.tv_nsec) / 1e9;
  EXPECT_LT(cpu_s, 0.3) << "the endpoint spins while accept fails";

  // With descriptors back, the waiting connection is served.
  for (int f : fillers) close(f);
  fillers.clear();
  setrlimit(RLIMIT_NOFILE, &before);
  const auto t0 = steady::now();
  ASSERT_TRUE(send_all(client.fd, "GET /metrics HTTP/1.0\r\n\r\n", t0 + 1s));
  const received r = read_until_closed(client.fd, t0 + 1s);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.text.rfind("HTTP/1.0 200 ", 0), 0u) << r.text;
}

TEST(MetricsHttp, ListensOnlyOnLoopbackUnlessAllowed) {
  try {
    metrics_http m("0.0.0.0:0", [] { return kBody; });
    ADD_FAILURE() << "0.0.0.0 accepted without allow_remote";
  } catch (const deepwell::error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics_remote"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loopback"), std::string::npos) << e.what();
  }
  EXPECT_THROW(metrics_http("192.168.1.10:0", [] { return kBody; }), deepwell::error);
  {
    metrics_http m("0.0.0.0:0", [] { return kBody; }, true);
    EXPECT_NE(m.port(), 0);
    EXPECT_EQ(http_get(m.port(), "/metrics", 2000ms).status, 200);
  }
  for (const char* loopback : {"localhost:0", "127.0.0.1:0", "127.0.0.2:0"}) {
    metrics_http m(loopback, [] { return kBody; });
    EXPECT_NE(m.port(), 0) << loopback;
  }
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:9100x", "127.0.0.1:65536", "nohost:0"})
    EXPECT_THROW(metrics_http(bad, [] { return kBody; }), deepwell::error) << bad;
}

}  // namespace

#endif  // DEEPWELL_HAVE_SERVER
