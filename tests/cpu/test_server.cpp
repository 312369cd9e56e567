// Server mode end to end on the CPU: `deepwell serve`'s server on a thread
// of this process, clients over its Unix socket (server_link, and raw
// wire messages where a test plays a broken or hostile client). Data read
// back equals data written, byte for byte; grants hold on the command
// path; a client that vanishes leaves nothing behind; a server that stops
// reaches its clients as controller_lost; nothing a client sends stops it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/server/config.hpp"
#include "deepwell/server/server.hpp"
#include "deepwell/views/array.hpp"
#include "protocol/wire.hpp"
#include "cache_test_support.hpp"
#include "server_test_support.hpp"
#include "prometheus_format.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t data_bytes = 4 << 20;
constexpr uint64_t secret_bytes = 1 << 20;

std::string socket_path() {
  static std::atomic<int> n{0};
  return "/tmp/deepwell-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

// A server with three datasets: "data" (a file, read-write for this uid),
// "mem" (host memory, read-only for everyone) and "secret" (a file granted
// to another uid only).
class ServerTest : public ::testing::Test {
 protected:
  test::scratch_file data{data_bytes, 11};
  test::scratch_file secret{secret_bytes, 12};
  std::string sock = socket_path();
  std::unique_ptr<server::server> srv;
  std::thread loop;

  std::string config_text(const std::string& extra = {}) const {
    const std::string uid = std::to_string(getuid());
    return "[server]\nsocket = \"" + sock + "\"\npollers = 2\nio_budget = \"1MiB\"\nmax_queue_pairs = 16\n" +
           "[[dataset]]\nname = \"data\"\nfile = \"" + data.path() + "\"\nwritable = true\n" +
           "[[dataset]]\nname = \"mem\"\nmemory = \"1MiB\"\n" +
           "[[dataset]]\nname = \"secret\"\nfile = \"" + secret.path() + "\"\n" +
           "[[grant]]\ndataset = \"data\"\nuid = " + uid + "\naccess = \"read-write\"\n" +
           "[[grant]]\ndataset = \"mem\"\neveryone = true\n" +
           "[[grant]]\ndataset = \"secret\"\nuid = " + std::to_string(getuid() + 4242) + "\n" + extra;
  }
  void start(const std::string& extra = {}) {
    srv = std::make_unique<server::server>(server::parse_config(config_text(extra), "test.toml"));
    loop = std::thread([this] { srv->run(); });
  }
  // Keys added to the [server] section.
  void start_with_server_keys(const std::string& keys) {
    std::string text = config_text();
    text.insert(text.find("[[dataset]]"), keys);
    srv = std::make_unique<server::server>(server::parse_config(text, "test.toml"));
    loop = std::thread([this] { srv->run(); });
  }
  void stop() {
    if (!srv) return;
    srv->stop();
    if (loop.joinable()) loop.join();
  }
  void SetUp() override { start(); }
  void TearDown() override {
    stop();
    srv.reset();
  }

  // Waits up to `limit` for `cond`.
  template <class F>
  static bool eventually(F cond, std::chrono::milliseconds limit = 3000ms) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (cond()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return cond();
  }

  cache_config cache_cfg(uint64_t pages = 64) const {
    cache_config c = test::small_cache(pages);
    c.direct_tier = false;  // through the server's queues
    c.timeout_ns = 5'000'000'000ull;
    return c;
  }
};

using test::raw_call;
using test::raw_connect;

// Everything a client can do wrong, on the socket and in its queues, until
// `stop`: commands of random bytes, or plausible ones naming other
// namespaces, huge LBAs, other staging, reused command ids; doorbells in
// range, out of range and backwards; queue pairs opened and dropped.
void hostile_client(const std::string& sock, const std::atomic<bool>& stop, std::atomic<uint64_t>& hostile_rounds,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  while (!stop.load()) {
    auto link = server_link::connect(sock, "hostile");
    std::vector<std::unique_ptr<queue_pair_handle>> qps;
    for (int i = 0; i < 4; ++i) qps.push_back(link->open_queue_pair({16, 16, 4096}));
    for (int round = 0; round < 200 && !stop.load(); ++round) {
      queue_pair_handle& q = *qps[rng() % qps.size()];
      const qp_header* h = q.header();
      auto* base = static_cast<uint8_t*>(q.base());
      auto* sq = reinterpret_cast<nvme::command*>(base + h->sq_offset);
      // Commands: random bytes, or plausible ones naming other
      // namespaces, huge LBAs, other staging, reused command ids.
      for (uint32_t i = 0; i < 16; ++i) {
        nvme::command c{};
        if (rng() % 3 == 0) {
          auto* w = reinterpret_cast<uint64_t*>(&c);
          for (size_t k = 0; k < sizeof c / 8; ++k) w[k] = rng();
        } else {
          c = rng() % 2 ? nvme::make_read(uint32_t(rng() % 5), rng() % 2 ? rng() : rng() % 2048, 1, (rng() % 32) * 4096)
                        : nvme::make_write(uint32_t(rng() % 5), rng() % 512, 1, (rng() % 32) * 4096);
          c.cid = uint16_t(rng() % 4);
        }
        std::memcpy(static_cast<void*>(sq + i), &c, sizeof c);
      }
      // Doorbells: in range, out of range, backwards.
      auto* db = const_cast<uint32_t*>(&h->sq_tail_doorbell);
      shared_store_release(db, uint32_t(rng() % 8 == 0 ? rng() : rng() % 16));
      shared_store_release(const_cast<uint32_t*>(&h->cq_head_doorbell), uint32_t(rng() % 16));
      if (rng() % 16 == 0) qps[rng() % qps.size()] = link->open_queue_pair({16, 16, 4096});
    }
    hostile_rounds.fetch_add(1);
  }
}

}  // namespace

TEST_F(ServerTest, ClientsReadAndWriteThroughTheServerByteForByte) {
  auto link = server_link::connect(sock, "writer");
  const uint32_t ns = link->lookup("data");
  EXPECT_EQ(link->info(ns).bytes, data_bytes);
  EXPECT_TRUE(link->may_write(ns));
  {
    // A cache of 64 pages over 1024: every word read under eviction.
    array<uint64_t> a(make_host_page_cache(link, cache_cfg()), ns);
    for (uint64_t i = 0; i < a.size(); i += 7) {
      request_status s;
      ASSERT_EQ(a.ref().try_read(i, &s), test::pattern_word(i * 8, 11)) << "word " << i;
      ASSERT_TRUE(s.ok());
    }
    for (uint64_t i = 0; i < a.size(); i += 509) ASSERT_TRUE(a.ref().write(i, ~i).ok());
    ASSERT_TRUE(a.cache().flush().ok());
  }
  // Another client sees the writes after the flush, and so does the file.
  auto other = server_link::connect(sock, "reader");
  array<uint64_t> b(make_host_page_cache(other, cache_cfg()), other->lookup(data.path()));
  const std::vector<uint64_t> file = test::file_words(data.path(), data_bytes);
  for (uint64_t i = 0; i < b.size(); i += 509) {
    EXPECT_EQ(b.ref()[i], ~i);
    EXPECT_EQ(file[i], ~i);
  }
  for (uint64_t i = 1; i < b.size(); i += 509) EXPECT_EQ(b.ref()[i], test::pattern_word(i * 8, 11));
  const auto stats = nlohmann::json::parse(link->stats());
  ASSERT_EQ(stats["clients"].size(), 2u);
  EXPECT_GT(stats["clients"][0]["bytes_read"].get<uint64_t>(), data_bytes / 2);
  EXPECT_GT(stats["clients"][0]["bytes_written"].get<uint64_t>(), 0u);
  EXPECT_EQ(stats["datasets"].size(), 3u);
}

TEST_F(ServerTest, StatsKeepTheCountersOfClientsThatLeft) {
  {
    auto link = server_link::connect(sock, "short-lived");
    array<uint64_t> a(make_host_page_cache(link, cache_cfg()), link->lookup("data"));
    for (uint64_t i = 0; i < a.size(); i += 512) ASSERT_EQ(a.ref()[i], test::pattern_word(i * 8, 11));
  }
  ASSERT_TRUE(eventually([&] { return srv->client_count() == 0; }));
  auto other = server_link::connect(sock, "watcher");
  const auto j = nlohmann::json::parse(other->stats());
  EXPECT_EQ(j["departed_clients"].get<uint64_t>(), 1u);
  ASSERT_EQ(j["departed"].size(), 1u);
  EXPECT_EQ(j["departed"][0]["name"], "short-lived");
  EXPECT_GT(j["departed"][0]["bytes_read"].get<uint64_t>(), 0u);
  EXPECT_GE(j["server"]["poller_cpu_seconds"].get<double>(), 0.0);
}

TEST_F(ServerTest, AClientSeesOnlyWhatItIsGrantedOnEveryPath) {
  auto link = server_link::connect(sock);
  // Lookups: by name and path for granted datasets; the other uid's
  // dataset is not there for us, by name or by path.
  EXPECT_EQ(link->lookup("data"), link->lookup(data.path()));
  try {
    link->lookup("secret");
    FAIL() << "a dataset without a grant was found";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("no dataset 'secret' is offered to uid"), std::string::npos) << e.what();
  }
  EXPECT_THROW(link->lookup(secret.path()), error);
  const uint32_t secret_ns = 3;  // the config's third dataset
  EXPECT_THROW(link->info(secret_ns), error);
  EXPECT_EQ(link->map_dataset(link->lookup("data"), false), nullptr) << "a file, and files were not asked for";
  EXPECT_THROW(link->map_dataset(secret_ns, true), error);
  EXPECT_EQ(link->list().find("secret"), std::string::npos) << link->list();

  // The command path: the secret namespace does not exist on our queues;
  // "mem" (a read grant) reads and does not write.
  host_queue_client q(link->open_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> buf(4096, 0xEE), back(4096, 0);
  const request_status s = q.read(secret_ns, 0, 1, 4096, back.data());
  EXPECT_EQ(s.nvme, nvme::sc::invalid_namespace);
  EXPECT_EQ(q.write(secret_ns, 0, 1, 4096, buf.data()).nvme, nvme::sc::invalid_namespace);
  EXPECT_EQ(std::vector<uint8_t>(4096, 0), back) << "nothing of the secret reached our staging";
  const uint32_t mem = link->lookup("mem");
  EXPECT_FALSE(link->may_write(mem));
  EXPECT_TRUE(q.read(mem, 0, 1, 4096, back.data()).ok());
  EXPECT_EQ(q.write(mem, 0, 1, 4096, buf.data()).nvme, nvme::sc::write_to_read_only);
  // The direct tier: a read grant maps the memory read-only.
  auto m = link->map_dataset(mem, false);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bytes, 1u << 20);
  EXPECT_FALSE(m->writable);
  EXPECT_EQ(m->data[4095], 0);
  // The secret file is as it was.
  const std::vector<uint64_t> words = test::file_words(secret.path(), secret_bytes);
  for (uint64_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], test::pattern_word(i * 8, 12));
}

TEST_F(ServerTest, AClientThatVanishesHasItsQueuePairsReclaimed) {
  const int s = raw_connect(sock);
  ASSERT_GE(s, 0);
  ASSERT_EQ(raw_call(s, wire::op::hello, 0, 0, 0, "vanishing").h.status, 0);
  for (int i = 0; i < 3; ++i) {
    wire::message r = raw_call(s, wire::op::open_queue_pair, 64, 64, 4096);
    ASSERT_EQ(r.h.status, 0) << r.text;
    ASSERT_GE(r.fd, 0);
    close(r.fd);
  }
  EXPECT_EQ(srv->ctl().queue_pair_count(), 3u);
  EXPECT_EQ(srv->client_count(), 1u);
  close(s);  // dies without a word
  EXPECT_TRUE(eventually([&] { return srv->ctl().queue_pair_count() == 0 && srv->client_count() == 0; }));
  // The server goes on serving.
  auto link = server_link::connect(sock);
  host_queue_client q(link->open_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(q.read(link->lookup("data"), 2, 1, 4096, back.data()).ok());
  EXPECT_EQ(test::check_pattern(back.data(), 4096, 2 * 4096, 11), -1);
}

TEST_F(ServerTest, PerClientLimitsAndMalformedRequestsAreRefusedWithAReason) {
  const int s = raw_connect(sock);
  ASSERT_GE(s, 0);
  wire::message r = raw_call(s, wire::op::open_queue_pair, 64, 64, 4096);
  EXPECT_EQ(r.h.status, int32_t(wire::status::bad_request)) << "before hello";
  ASSERT_EQ(raw_call(s, wire::op::hello).h.status, 0);
  EXPECT_EQ(raw_call(s, wire::op::hello).h.status, int32_t(wire::status::bad_request)) << "hello twice";
  EXPECT_EQ(raw_call(s, wire::op::open_queue_pair, 63, 64, 4096).h.status, int32_t(wire::status::bad_request));
  EXPECT_EQ(raw_call(s, wire::op::open_queue_pair, 64, 64, 100).h.status, int32_t(wire::status::bad_request));
  EXPECT_EQ(raw_call(s, wire::op::open_queue_pair, 64, 64, 1u << 31).h.status, int32_t(wire::status::bad_request));
  EXPECT_EQ(raw_call(s, wire::op(99)).h.status, int32_t(wire::status::bad_request));
  EXPECT_EQ(raw_call(s, wire::op::info, 0).h.status, int32_t(wire::status::not_found));
  EXPECT_EQ(raw_call(s, wire::op::info, 0xFFFFFFFF).h.status, int32_t(wire::status::not_found));
  EXPECT_EQ(raw_call(s, wire::op::close_queue_pair, 12345).h.status, int32_t(wire::status::not_found));
  std::vector<int> fds;
  for (int i = 0; i < 16; ++i) {
    r = raw_call(s, wire::op::open_queue_pair, 4, 4, 4096);
    ASSERT_EQ(r.h.status, 0) << r.text;
    fds.push_back(r.fd);
  }
  r = raw_call(s, wire::op::open_queue_pair, 4, 4, 4096);
  EXPECT_EQ(r.h.status, int32_t(wire::status::limit));
  EXPECT_NE(r.text.find("max_queue_pairs"), std::string::npos) << r.text;
  // Another client's queue pair cannot be closed from here.
  auto other = server_link::connect(sock);
  auto theirs = other->open_queue_pair({4, 4, 4096});
  EXPECT_EQ(raw_call(s, wire::op::close_queue_pair, theirs->id()).h.status, int32_t(wire::status::not_found));
  EXPECT_EQ(theirs->state(), queue_state::running);
  // A memfd we were given cannot be shrunk under the server (sealed).
  EXPECT_NE(ftruncate(fds[0], 0), 0);
  for (int fd : fds) close(fd);
  // Garbage on the socket ends that connection only.
  const char junk[] = "not a deepwell message at all";
  ASSERT_EQ(send(s, junk, sizeof junk, 0), ssize_t(sizeof junk));
  char c;
  EXPECT_EQ(recv(s, &c, 1, 0), 0) << "the server hung up on garbage";
  close(s);
  EXPECT_TRUE(eventually([&] { return srv->client_count() == 1; }));
  EXPECT_EQ(theirs->state(), queue_state::running);
}

// A hostile client does everything a client can do wrong, on the socket
// and in its queues, while an honest one checks every byte it reads; the
// honest one sees no error, the server stays up, no dataset changes
// outside the hostile client's grants.
TEST_F(ServerTest, AHostileClientCannotHurtTheServerOrAnHonestClient) {
#ifdef DEEPWELL_TSAN_BUILD
  // The hostile thread rewrites submission entries while the poller copies
  // them: a race by design (the controller copies once and checks the
  // copy), which ThreadSanitizer rightly reports within one process. The
  // hostile process of the next test does the same where it cannot see it.
  GTEST_SKIP() << "a deliberate data race with the poller; covered by AHostileProcessIsKilledAndReclaimed...";
#endif
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> hostile_rounds{0};
  std::thread hostile([&] { hostile_client(sock, stop, hostile_rounds, 99); });
  // Whatever fails below, the hostile thread is stopped and joined.
  struct joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_hostile{stop, hostile};
  // The honest client: every word of "data" it reads is the pattern (the
  // hostile client has the same uid here, so it may write "data" too: its
  // writes go to the first half, the honest client checks the second).
  auto link = server_link::connect(sock, "honest");
  array<uint64_t> a(make_host_page_cache(link, cache_cfg(32)), link->lookup("data"));
  uint64_t reads = 0;
  const auto end = std::chrono::steady_clock::now() + 2s;
  std::mt19937_64 rng(5);
  const uint64_t words = a.size();
  while (std::chrono::steady_clock::now() < end) {
    const uint64_t i = words / 2 + rng() % (words / 2);
    request_status s;
    ASSERT_EQ(a.ref().try_read(i, &s), test::pattern_word(i * 8, 11)) << "word " << i;
    ASSERT_TRUE(s.ok()) << describe(s);
    ++reads;
    if (reads % 64 == 0) ASSERT_TRUE(a.cache().clear().ok());  // back to the server for more
  }
  stop = true;
  hostile.join();
  EXPECT_GT(hostile_rounds.load(), 0u);
  EXPECT_TRUE(eventually([&] { return srv->client_count() == 1; })) << "the hostile client's connections closed";
  // Progress, not speed: a stalled honest client would make none (or time
  // out above). On a loaded two-core CI machine (the hostile thread, two
  // pollers and the server thread beside it) about 300 reads a second is
  // what it gets, before and after this server's changes alike.
  EXPECT_GT(reads, 200u);
  // The secret dataset, granted to no one here, is as it was; the server
  // still answers, and says what the hostile client got wrong.
  const std::vector<uint64_t> words2 = test::file_words(secret.path(), secret_bytes);
  for (uint64_t i = 0; i < words2.size(); ++i) ASSERT_EQ(words2[i], test::pattern_word(i * 8, 12));
  const auto stats = nlohmann::json::parse(link->stats());
  EXPECT_EQ(stats["clients"].size(), 1u) << "the hostile client's connections were reclaimed";
  EXPECT_EQ(srv->ctl().queue_pair_count(), stats["clients"][0]["queue_pairs"].get<uint32_t>()) << srv->ctl().dump();
}

TEST_F(ServerTest, AServerThatStopsReachesItsClientsAsControllerLost) {
  auto link = server_link::connect(sock);
  array<uint64_t> a(make_host_page_cache(link, cache_cfg()), link->lookup("data"));
  EXPECT_EQ(a.ref()[3], test::pattern_word(24, 11));
  stop();
  EXPECT_TRUE(eventually([&] { return !link->connected(); }, 2000ms)) << "the watcher saw the server go";
  request_status s;
  const auto t0 = std::chrono::steady_clock::now();
  a.ref().try_read(100000, &s);  // not cached: needs the server
  EXPECT_EQ(s.code, client_code::controller_lost) << describe(s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "no waiting for the deadline";
  EXPECT_THROW(link->lookup("data"), error);
  // A new server on the same socket path; clients connect again.
  srv.reset();
  start();
  auto again = server_link::connect(sock);
  array<uint64_t> b(make_host_page_cache(again, cache_cfg()), again->lookup("data"));
  EXPECT_EQ(b.ref()[100000], test::pattern_word(800000, 11));
}

TEST_F(ServerTest, StatsAndPrometheusMetricsDescribeClientsAndDatasets) {
  // Per-client and per-dataset series are the operator's choice.
  stop();
  srv.reset();
  start("");
  EXPECT_EQ(srv->prometheus().find("deepwell_dataset_bytes"), std::string::npos)
      << "without metrics_detail, the endpoint shows totals only";
  stop();
  srv.reset();
  sock = socket_path();
  start_with_server_keys("metrics_detail = true\n");
  auto link = server_link::connect(sock, "metrics-client");
  host_queue_client q(link->open_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> back(4096);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(q.read(link->lookup("data"), uint64_t(i), 1, 4096, back.data()).ok());
  EXPECT_FALSE(q.read(3, 0, 1, 4096, back.data()).ok());
  const std::string text = srv->prometheus();
  EXPECT_NE(text.find("deepwell_client_commands_total{client=\"1\",name=\"metrics-client\""), std::string::npos) << text;
  EXPECT_NE(text.find("deepwell_client_latency_seconds_bucket"), std::string::npos);
  EXPECT_NE(text.find("deepwell_dataset_bytes{dataset=\"data\"} " + std::to_string(data_bytes)), std::string::npos);
  EXPECT_EQ(test::exposition_problem(text), "") << text;
  const auto j = nlohmann::json::parse(srv->stats_json());
  const auto& c = j["clients"][0];
  EXPECT_EQ(c["reads"].get<uint64_t>(), 11u) << "read commands, the refused one too";
  EXPECT_EQ(c["errors"].get<uint64_t>(), 1u);
  EXPECT_EQ(c["bytes_read"].get<uint64_t>(), 40960u);
  EXPECT_GT(c["latency_us_p99"].get<double>(), 0.0);
  EXPECT_EQ(c["grants"].size(), 2u);
  if (!std::getenv("DEEPWELL_POLLER_SPIN_US"))
    EXPECT_EQ(j["server"]["poller_spin_us"].get<uint32_t>(), 1000u) << "a server's pollers spin 1 ms by default";
}

TEST(ServerStart, ASocketPathInUseOrNotASocketIsOneClearError) {
  test::scratch_file f(4096, 1);
  const std::string uid = std::to_string(getuid());
  auto cfg_at = [&](const std::string& sock) {
    return server::parse_config("[server]\nsocket = \"" + sock + "\"\n[[dataset]]\nname = \"d\"\nfile = \"" +
                                    f.path() + "\"\n[[grant]]\ndataset = \"d\"\nuid = " + uid + "\n",
                                "start.toml");
  };
  try {
    server::server s(cfg_at(f.path()));
    FAIL() << "served on a regular file";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not a socket"), std::string::npos) << e.what();
  }
  const std::string sock = socket_path();
  server::server first(cfg_at(sock));
  try {
    server::server second(cfg_at(sock));
    FAIL() << "two servers on one socket";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("another deepwell server is listening"), std::string::npos) << e.what();
  }
  try {
    auto c = cfg_at(socket_path());
    c.datasets[0].path = "/nonexistent/deepwell/file";
    server::server s(c);
    FAIL() << "a missing dataset file";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("start.toml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent/deepwell/file"), std::string::npos) << e.what();
  }
}

// The hostile client of the next test, in a process of its own: the test
// binary runs itself with this test selected and the socket in the
// environment. Alone, it has nothing to do.
TEST(ServerHostileChild, Run) {
  const char* sock = std::getenv("DEEPWELL_TEST_HOSTILE_SOCKET");
  if (!sock) GTEST_SKIP() << "the hostile process of ServerTest.AHostileProcessIsKilledAndReclaimed";
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0};
  hostile_client(sock, stop, rounds, 7);  // until it is killed
}

extern char** environ;

TEST_F(ServerTest, AHostileProcessIsKilledAndReclaimedWhileAnHonestOneReads) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  env_strings.push_back("DEEPWELL_TEST_HOSTILE_SOCKET=" + sock);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=ServerHostileChild.Run";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  struct reaper {
    pid_t pid;
    ~reaper() {
      if (pid <= 0) return;  // never kill(-1): that is every process we may signal
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reap{pid};
  auto link = server_link::connect(sock, "honest");
  ASSERT_TRUE(eventually([&] { return srv->client_count() == 2; })) << "the hostile process connected";
  array<uint64_t> a(make_host_page_cache(link, cache_cfg(32)), link->lookup("data"));
  std::mt19937_64 rng(6);
  const uint64_t words = a.size();
  uint64_t reads = 0;
  const auto end = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < end) {
    const uint64_t i = words / 2 + rng() % (words / 2);  // the hostile writes go to the first half
    request_status s;
    ASSERT_EQ(a.ref().try_read(i, &s), test::pattern_word(i * 8, 11)) << "word " << i;
    ASSERT_TRUE(s.ok()) << describe(s);
    if (++reads % 64 == 0) ASSERT_TRUE(a.cache().clear().ok());
  }
  // Killed mid-flood: its connection closes and its queues go, with
  // commands perhaps in flight.
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  reap.pid = 0;  // reaped
  EXPECT_TRUE(WIFSIGNALED(status)) << "the hostile process ran until killed";
  EXPECT_TRUE(eventually([&] { return srv->client_count() == 1; }));
  const auto stats = nlohmann::json::parse(link->stats());
  EXPECT_TRUE(eventually([&] {
    return srv->ctl().queue_pair_count() == stats["clients"][0]["queue_pairs"].get<uint32_t>();
  })) << srv->ctl().dump();
  EXPECT_GT(reads, 100u) << "the honest client kept going";
  const std::vector<uint64_t> secret_words = test::file_words(secret.path(), secret_bytes);
  for (uint64_t i = 0; i < secret_words.size(); ++i) ASSERT_EQ(secret_words[i], test::pattern_word(i * 8, 12));
  for (uint64_t i = 0; i < 1000; ++i) {
    const uint64_t w = words / 2 + rng() % (words / 2);
    ASSERT_EQ(a.ref()[w], test::pattern_word(w * 8, 11));
  }
}

// A server from a configuration's text, serving on a thread of its own
// until the end of the scope.
struct running_server {
  server::server s;
  std::thread loop;
  explicit running_server(const std::string& toml) : s(server::parse_config(toml, "tier.toml")) {
    loop = std::thread([this] { s.run(); });
  }
  ~running_server() {
    s.stop();
    loop.join();
  }
};

TEST(ServerHostTier, ASecondProgramReadsWhatTheFirstBroughtIntoHostMemory) {
  test::scratch_file f(1 << 20, 31);
  const std::string sock = socket_path();
  running_server srv("[server]\nsocket = \"" + sock + "\"\nhost_cache = \"2MiB\"\n" + "[[dataset]]\nname = \"d\"\nfile = \"" +
                     f.path() + "\"\n" + "[[grant]]\ndataset = \"d\"\neveryone = true\n");
  cache_config cfg = test::small_cache(32);
  cfg.direct_tier = false;
  uint64_t storage_after_first = 0;
  for (int program = 0; program < 2; ++program) {
    auto link = server_link::connect(sock, "program " + std::to_string(program));
    array<uint64_t> a(make_host_page_cache(link, cfg), link->lookup("d"));
    for (uint64_t i = 0; i < a.size(); i += 512) ASSERT_EQ(a.ref()[i], test::pattern_word(i * 8, 31)) << i;
    const auto j = nlohmann::json::parse(link->stats());
    if (program == 0) {
      storage_after_first = j["host_tier"]["misses"].get<uint64_t>();
      EXPECT_EQ(storage_after_first, 256u) << "the first program's reads went to storage";
    } else {
      EXPECT_EQ(j["host_tier"]["misses"].get<uint64_t>(), storage_after_first) << "none of the second's did";
      EXPECT_EQ(j["host_tier"]["hits"].get<uint64_t>(), 256u);
    }
  }
  EXPECT_NE(srv.s.prometheus().find("deepwell_host_tier_hits_total 256"), std::string::npos);
}

TEST(ServerHostTier, AGrantedProgramCopiesTierPagesItselfAndSeesNoOtherDataset) {
  test::scratch_file f(1 << 20, 32), other(1 << 20, 33);
  const std::string sock = socket_path();
  running_server srv("[server]\nsocket = \"" + sock + "\"\nhost_cache = \"2MiB\"\n" + "[[dataset]]\nname = \"d\"\nfile = \"" +
                     f.path() + "\"\n" + "[[dataset]]\nname = \"secret\"\nfile = \"" + other.path() + "\"\n" +
                     "[[grant]]\ndataset = \"d\"\neveryone = true\n" + "[[grant]]\ndataset = \"secret\"\nuid = " +
                     std::to_string(getuid() + 4242) + "\n");
  cache_config cfg = test::small_cache(32);
  cfg.direct_files = cache_config::file_tier::never;  // the tier, not a mapping of the file
  uint64_t hits = 0, misses = 0;
  for (int program = 0; program < 2; ++program) {
    auto link = server_link::connect(sock, "program " + std::to_string(program));
    array<uint64_t> a(make_host_page_cache(link, cfg), link->lookup("d"));
    for (uint64_t i = 0; i < a.size(); i += 512) ASSERT_EQ(a.ref()[i], test::pattern_word(i * 8, 32)) << i;
    const auto j = nlohmann::json::parse(link->stats());
    const cache_stats cs = a.cache().stats();
    if (program == 0) {
      hits = j["host_tier"]["hits"].get<uint64_t>();
      misses = j["host_tier"]["misses"].get<uint64_t>();
      EXPECT_EQ(misses, 256u) << "the first program's reads went to storage";
      EXPECT_EQ(cs.tier_fills, 0u);
    } else {
      EXPECT_EQ(j["host_tier"]["misses"].get<uint64_t>(), misses) << "none of the second's went to storage";
      EXPECT_EQ(j["host_tier"]["hits"].get<uint64_t>(), hits) << "nor through the server at all";
      EXPECT_EQ(cs.tier_fills, 256u) << "it copied every page from the arena it mapped";
      // The arena is mapped read-only and cannot be made writable; another
      // tenant's dataset has no arena for this client.
      auto m = link->map_tier(link->lookup("d"));
      ASSERT_TRUE(m);
      EXPECT_NE(mprotect(m->base, 4096, PROT_READ | PROT_WRITE), 0);
      const uint32_t secret = 2;
      EXPECT_THROW(link->map_tier(secret), error);
    }
  }
}

// host_cache_page: a tier of 64 KiB pages. A program whose cache has 64 KiB
// pages copies them from the arena itself; one with 4 KiB pages reads
// through commands, which the server answers from its 64 KiB frames. Both
// read every word right.
TEST(ServerHostTier, ATierOfLargePagesServesCachesOfItsPageItselfAndOthersByCommand) {
  test::scratch_file f((1 << 20) + (64 << 10), 34);  // 17 tier pages
  const std::string sock = socket_path();
  running_server srv("[server]\nsocket = \"" + sock + "\"\nhost_cache = \"4MiB\"\nhost_cache_page = \"64KiB\"\n" +
                     "[[dataset]]\nname = \"d\"\nfile = \"" + f.path() + "\"\n" +
                     "[[grant]]\ndataset = \"d\"\neveryone = true\n");
  for (int program = 0; program < 3; ++program) {
    cache_config cfg = test::small_cache(32);
    if (program < 2) {
      cfg.page_size = 65536;
      cfg.capacity_bytes = 32ull * 65536;
    }
    cfg.direct_files = cache_config::file_tier::never;  // the tier, not a mapping of the file
    auto link = server_link::connect(sock, "program " + std::to_string(program));
    array<uint64_t> a(make_host_page_cache(link, cfg), link->lookup("d"));
    for (uint64_t i = 0; i < a.size(); i += 7) ASSERT_EQ(a.ref()[i], test::pattern_word(i * 8, 34)) << i;
    const auto j = nlohmann::json::parse(link->stats());
    const cache_stats cs = a.cache().stats();
    if (program == 0) {
      EXPECT_EQ(j["host_tier"]["misses"].get<uint64_t>(), 17u) << "a miss reads a 64 KiB page from storage";
    } else if (program == 1) {
      EXPECT_EQ(cs.tier_fills, 17u) << "64 KiB pages: copied from the arena";
      EXPECT_EQ(j["host_tier"]["misses"].get<uint64_t>(), 17u) << "nothing more from storage";
    } else {
      EXPECT_EQ(cs.tier_fills, 0u) << "4 KiB pages: not the tier's size, so commands";
      EXPECT_EQ(j["host_tier"]["misses"].get<uint64_t>(), 17u) << "served from the tier's frames";
    }
  }
}
