// The services over the link, under a server started by the test: a KV
// store on a dataset granted read-write, a graph and a column file's
// query on datasets granted read-only, each giving what the same service
// gives in process; and sections (section.hpp), which those services are
// built from, refused with a reason wherever a client asks for more than
// its grant, the dataset or its limits allow.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/checked_runs.hpp"
#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/graph/reference.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/server/config.hpp"
#include "deepwell/server/server.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/index.hpp"
#include "deepwell/views/array.hpp"
#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "protocol/wire.hpp"
#include "cache_test_support.hpp"
#include "server_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

std::string socket_path() {
  static std::atomic<int> n{0};
  return "/tmp/deepwell-svc-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

constexpr uint64_t kv_bytes = 8 << 20;

graph::csr_graph test_graph() {
  graph::generator_options o;
  o.scale = test::scale_div > 1 ? 10 : 12;
  o.degree = 8;
  o.seed = 7;
  o.weighted = true;
  return graph::generate(o);
}

// A server with a KV dataset (read-write for this uid), a graph file and
// a column file (read-only for everyone) and a file granted to another uid.
class Services : public ::testing::Test {
 protected:
  test::scratch_file kv{kv_bytes, 0};
  test::scratch_file graph_file{"g.dwg"};
  test::scratch_file columns{"t.dwcol"};
  test::scratch_file secret{1 << 20, 5};
  test::scratch_file vectors_file{"v.dwv"};
  std::vector<uint8_t> base_rows;
  graph::csr_graph g = test_graph();
  std::string sock = socket_path();
  test::server_thread server_;

  void SetUp() override {
    graph::write_csr(graph_file.path(), g);
    table::taxi_gen_options t;
    t.rows = 30000;
    t.seed = 3;
    t.row_group_rows = 4096;
    table::generate_taxi(columns.path(), t);
    vectors::mixture_options m;
    m.count = 3000;
    m.dim = 32;
    m.clusters = 8;
    base_rows = vectors::generate_mixture(m, 0, m.count);
    vectors::build_index({base_rows.data(), m.count, m.dim, vectors::vector_type::f32}, vectors::metric::l2,
                         vectors_file.path());
    start("");
  }
  void TearDown() override { stop(); }

  void start(const std::string& server_keys) {
    const std::string uid = std::to_string(getuid());
    const std::string text = "[server]\nsocket = \"" + sock + "\"\npollers = 2\n" + server_keys +
                             "[[dataset]]\nname = \"kv\"\nfile = \"" + kv.path() + "\"\nwritable = true\n" +
                             "[[dataset]]\nname = \"graph\"\nfile = \"" + graph_file.path() + "\"\n" +
                             "[[dataset]]\nname = \"taxi\"\nfile = \"" + columns.path() + "\"\n" +
                             "[[dataset]]\nname = \"secret\"\nfile = \"" + secret.path() + "\"\n" +
                             "[[dataset]]\nname = \"vectors\"\nfile = \"" + vectors_file.path() + "\"\n" +
                             "[[grant]]\ndataset = \"vectors\"\neveryone = true\n" +
                             "[[grant]]\ndataset = \"kv\"\nuid = " + uid + "\naccess = \"read-write\"\n" +
                             "[[grant]]\ndataset = \"graph\"\neveryone = true\n" +
                             "[[grant]]\ndataset = \"taxi\"\neveryone = true\n" +
                             "[[grant]]\ndataset = \"secret\"\nuid = " + std::to_string(getuid() + 4242) + "\n";
    server_.start(text);
  }
  void stop() { server_.stop(); }

  cache_config cache_cfg(uint64_t pages = 64) const {
    cache_config c = test::small_cache(pages);
    c.timeout_ns = 10'000'000'000ull;
    return c;
  }
};

// Values of key k in a store of 16-byte values.
std::vector<uint8_t> value_of(uint64_t k) {
  std::vector<uint8_t> v(16);
  for (int i = 0; i < 16; ++i) v[i] = uint8_t(k * 31 + i);
  return v;
}

TEST_F(Services, AKvStoreOnAGrantedDatasetKeepsItsDataAcrossConnections) {
  using namespace durable;
  const uint64_t n = 2000;
  std::vector<uint64_t> keys(n);
  std::vector<uint8_t> values(n * 16);
  for (uint64_t i = 0; i < n; ++i) {
    keys[i] = i * 7 + 3;
    std::memcpy(values.data() + i * 16, value_of(keys[i]).data(), 16);
  }
  kv_config cfg;
  cfg.value_bytes = 16;
  cfg.capacity = 4000;
  cfg.log_rows = 4096;
  ASSERT_LE(kv_store::bytes_needed(cfg), kv_bytes);
  {
    auto link = server_link::connect(sock, "kv writer");
    auto cache = make_host_page_cache(link, cache_cfg());
    kv_store s = kv_store::create(cache, link->open_dataset({"kv", true}), cfg);
    const kv_batch_result r = s.set(keys.data(), values.data(), n);
    EXPECT_EQ(r.inserted, n);
    // Half erased, in a second batch that stays in the log (no checkpoint).
    s.erase(keys.data(), n / 2);
  }
  // A new connection (another program) opens it by path and recovers.
  auto link = server_link::connect(sock, "kv reader");
  auto cache = make_host_page_cache(link, cache_cfg());
  kv_store s = kv_store::open_file(cache, kv.path(), {.value_bytes = 16});
  std::vector<uint8_t> got(n * 16), status(n);
  const kv_batch_result r = s.get(keys.data(), got.data(), n, kv_memory::host, status.data());
  EXPECT_EQ(r.found, n - n / 2);
  for (uint64_t i = 0; i < n; ++i) {
    if (i < n / 2) {
      EXPECT_EQ(status[i], kv_not_found) << i;
    } else {
      ASSERT_EQ(status[i], kv_ok) << i;
      ASSERT_EQ(std::memcmp(got.data() + i * 16, values.data() + i * 16, 16), 0) << "key " << keys[i];
    }
  }
  EXPECT_TRUE(s.info().table_checksums);
  // The same bytes the store wrote are in the file: the embedded store reads them.
  s.checkpoint();
}

TEST_F(Services, AKvStoreIsRefusedOnAReadOnlyGrantAndOnANameNotGranted) {
  using namespace durable;
  auto link = server_link::connect(sock);
  auto cache = make_host_page_cache(link, cache_cfg());
  test::expect_error([&] { kv_store::open_file(cache, graph_file.path()); }, "not writable by this client");
  test::expect_error([&] { kv_store::open_file(cache, "secret"); }, "no dataset 'secret'");
  // A store made on the read-only dataset by its namespace is refused too
  // (the sections it asks for need the write right).
  const uint32_t ro = link->open_dataset({"graph", false});
  test::expect_error([&] { kv_store::create(cache, ro, {.value_bytes = 16, .capacity = 10}); }, "read-only");
}

TEST_F(Services, AGraphRunUnderTheServerGivesTheInProcessAnswer) {
  graph::csr_file file(graph_file.path());
  const graph::csr_view v = graph::view_of(g);
  const uint32_t source = 1;
  graph::cpu_exec x(3);
  graph::bfs_options o;
  o.source = source;
  auto link = server_link::connect(sock, "bfs");
  // Smaller than the neighbours (the graph is smaller under ThreadSanitizer):
  // misses through the server's queues, under eviction.
  cache_config cc = cache_cfg(test::scale_div > 1 ? 10 : 16);
  cc.direct_tier = false;
  auto cache = make_host_page_cache(link, cc);
  graph::graph_arrays arrays(cache, file);
  ASSERT_GT(file.neighbours_bytes(), cc.capacity_bytes);
  EXPECT_EQ(graph::bfs(x, arrays, o).depth, graph::bfs_reference(v, source));
  EXPECT_EQ(graph::connected_components(x, arrays, g.flags).label, graph::cc_reference(v));
  EXPECT_GT(cache->stats().misses, 0u);
  // A second client's graph_arrays reuse the same sections (no new ones).
  auto link2 = server_link::connect(sock, "bfs again");
  auto cache2 = make_host_page_cache(link2, cc);
  graph::graph_arrays again(cache2, file);
  for (auto s : {graph::csr_section::offsets, graph::csr_section::neighbours, graph::csr_section::weights})
    EXPECT_EQ(again.section_namespace(s), arrays.section_namespace(s));
  EXPECT_EQ(graph::bfs(x, again, o).depth, graph::bfs_reference(v, source));
  // The direct tier: the file is in memory (just written), so the server
  // hands out the sections' mappings once it has checked them.
  cache_config direct = cache_cfg(16);
  direct.direct_files = cache_config::file_tier::resident;
  auto cache3 = make_host_page_cache(link2, direct);
  graph::graph_arrays mapped(cache3, file);
  EXPECT_TRUE(mapped.edges_direct());
  EXPECT_EQ(graph::bfs(x, mapped, o).depth, graph::bfs_reference(v, source));
}

// A vector index read only over the link: the client opens it by the
// dataset's name (no file of that name here), the records through a cache
// far smaller than them, and gets the in-process answers.
TEST_F(Services, AVectorIndexUnderTheServerGivesTheInProcessAnswer) {
  vectors::mixture_options qm;
  qm.count = 40;
  qm.dim = 32;
  qm.clusters = 8;
  qm.stream = 1;
  const std::vector<uint8_t> qb = vectors::generate_mixture(qm, 0, qm.count);
  std::vector<float> q(qb.size() / 4);
  std::memcpy(q.data(), qb.data(), qb.size());
  vectors::search_options o;
  o.k = 10;
  auto answers = [&](std::shared_ptr<page_cache> cache, const std::string& name) {
    vectors::vector_index index(std::move(cache), name);
    std::vector<uint32_t> ids(qm.count * o.k);
    std::vector<float> d(ids.size());
    index.search(q.data(), qm.count, o, ids.data(), d.data(), 2);
    return ids;
  };
  cache_config cc = cache_cfg(8);
  cc.direct_tier = false;
  const std::vector<uint32_t> here = answers(make_host_page_cache(embedded_link(), cc), vectors_file.path());
  ASSERT_NE(::access("vectors", F_OK), 0);  // the client cannot read the file by that name
  auto link = server_link::connect(sock, "vectors");
  auto cache = make_host_page_cache(link, cc);
  EXPECT_EQ(answers(cache, "vectors"), here);
  EXPECT_GT(cache->stats().misses, 0u);
  test::expect_error([&] { vectors::vector_index(cache, "secret"); }, "no dataset 'secret'");
}

TEST_F(Services, ACorruptGraphBlockIsAnErrorUnderTheServerToo) {
  // One flipped byte in the neighbours, after the server opened the file.
  graph::csr_file file(graph_file.path());
  const uint64_t at = file.section_at(graph::csr_section::neighbours) + 5000;
  {
    std::fstream s(graph_file.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c;
    s.seekg(at);
    s.read(&c, 1);
    c = char(c ^ 0x10);
    s.seekp(at);
    s.write(&c, 1);
  }
  auto link = server_link::connect(sock);
  auto cache = make_host_page_cache(link, cache_cfg(256));
  graph::graph_dataset_options d;
  d.check_offsets = false;
  graph::graph_arrays arrays(cache, file, d);
  EXPECT_FALSE(arrays.edges_direct()) << "a section that fails its check is not mapped";
  graph::cpu_exec x(2);
  test::expect_error([&] { graph::connected_components(x, arrays, g.flags); }, "checksum");
}

TEST_F(Services, ATaxiQueryUnderTheServerGivesTheReferenceAnswer) {
  const table::column_file f = table::column_file::open(columns.path());
  for (int q : {0, 3, 5}) {
    table::taxi_query_options o;
    o.query = q;
    o.server = sock;
    o.cache.cache_bytes = 256 << 10;
    o.cache.page_size = 4096;
    o.workers = 3;
    const table::taxi_query_report r = table::run_taxi_query_cpu(f, o);
    EXPECT_EQ(r.error, "");
    const table::taxi_query_result want = table::taxi_reference(f, q);
    EXPECT_EQ(std::memcmp(&r.result, &want, sizeof want), 0) << "Q" << q;
  }
}

// ---- sections: what a client may ask for ----

struct section_call {
  uint32_t dataset = 0, block = 4096, flags = 0, sum_block = 0;
  uint64_t offset = 0, bytes = 4096, sums_offset = 0, sums_bytes = 0;
};

wire::message open_section_raw(int s, const section_call& c) {
  wire::message m;
  m.h.op = uint16_t(wire::op::open_section);
  m.h.a = c.dataset;
  m.h.b = c.block;
  m.h.c = c.flags;
  m.h.d = c.sum_block;
  m.h.x = c.offset;
  m.h.y = c.bytes;
  m.text.resize(16);
  std::memcpy(m.text.data(), &c.sums_offset, 8);
  std::memcpy(m.text.data() + 8, &c.sums_bytes, 8);
  wire::message r;
  if (!wire::send_message(s, std::move(m)) || !wire::receive_message(s, r)) r.h.status = -1;
  return r;
}

TEST_F(Services, SectionsOutsideTheGrantOrTheDatasetAreRefusedWithAReason) {
  const int s = test::raw_connect(sock);
  ASSERT_GE(s, 0);
  ASSERT_EQ(test::raw_call(s, wire::op::hello, 0, 0, 0, "hostile").h.status, 0);
  auto ns = [&](const char* name) { return test::raw_call(s, wire::op::lookup, 0, 0, 0, name).h.a; };
  const uint32_t kvn = ns("kv"), gn = ns("graph");
  const uint32_t secret_ns = 4;  // the config's fourth dataset, granted to another uid
  auto refused = [&](const section_call& c, wire::status st, const std::string& why) {
    const wire::message r = open_section_raw(s, c);
    EXPECT_EQ(r.h.status, int32_t(st)) << why << ": " << r.text;
    EXPECT_NE(r.text.find(why), std::string::npos) << r.text;
  };
  refused({.dataset = secret_ns}, wire::status::not_found, "no dataset namespace 4");
  refused({.dataset = 999}, wire::status::not_found, "no dataset namespace 999");
  refused({.dataset = gn, .flags = 1}, wire::status::denied, "not writable");
  refused({.dataset = kvn, .offset = kv_bytes - 4096, .bytes = 8192}, wire::status::bad_request, "not inside");
  refused({.dataset = kvn, .offset = ~0ull - 100, .bytes = 4096}, wire::status::bad_request, "not inside");
  refused({.dataset = kvn, .bytes = 0}, wire::status::bad_request, "at least one byte");
  refused({.dataset = kvn, .block = 3000}, wire::status::bad_request, "block size 3000");
  refused({.dataset = kvn, .flags = 7u << 8}, wire::status::bad_request, "unknown kind of sums");
  refused({.dataset = kvn, .flags = 2}, wire::status::bad_request, "malformed");
  // Sums: inside, apart from the data, big enough.
  refused({.dataset = kvn, .flags = 1 | 2u << 8, .sum_block = 4096, .offset = 0, .bytes = 1 << 20,
           .sums_offset = kv_bytes, .sums_bytes = 4096},
          wire::status::bad_request, "not inside the dataset");
  refused({.dataset = kvn, .flags = 1 | 2u << 8, .sum_block = 4096, .offset = 0, .bytes = 1 << 20,
           .sums_offset = 4096, .sums_bytes = 4096},
          wire::status::bad_request, "overlap");
  refused({.dataset = kvn, .flags = 1 | 2u << 8, .sum_block = 4096, .offset = 0, .bytes = 64 << 20 >> 4,
           .sums_offset = 6 << 20, .sums_bytes = 512},
          wire::status::bad_request, "its sums need");
  refused({.dataset = kvn, .flags = 1 | 2u << 8, .sum_block = 1000, .offset = 0, .bytes = 1 << 20,
           .sums_offset = 6 << 20, .sums_bytes = 4096},
          wire::status::bad_request, "not a power of two");
  refused({.dataset = gn, .flags = 1u << 8, .sum_block = 4096, .offset = 0, .bytes = 8192, .sums_offset = 8192,
           .sums_bytes = 4},
          wire::status::bad_request, "need 8 bytes of sums");
  // A block smaller than the sums' block: refused before any sums are read.
  refused({.dataset = kvn, .block = 512, .flags = 1 | 2u << 8, .sum_block = 4096, .offset = 0, .bytes = 1 << 20,
           .sums_offset = 6 << 20, .sums_bytes = 4096},
          wire::status::bad_request, "not a multiple of the sums' block");
  // A section of a section is refused: grants are decided on datasets.
  const wire::message ok = open_section_raw(s, {.dataset = kvn, .flags = 1, .offset = 65536, .bytes = 65536});
  ASSERT_EQ(ok.h.status, 0) << ok.text;
  refused({.dataset = ok.h.a}, wire::status::not_found, "no dataset namespace");
  // set_verify needs a writable section; checks of a section not granted are refused.
  const wire::message ro = open_section_raw(s, {.dataset = gn, .offset = 0, .bytes = 8192});
  ASSERT_EQ(ro.h.status, 0) << ro.text;
  EXPECT_EQ(test::raw_call(s, wire::op::set_verify, ro.h.a, 0).h.status, int32_t(wire::status::denied));
  EXPECT_EQ(test::raw_call(s, wire::op::set_verify, ok.h.a, 0).h.status, 0);
  EXPECT_EQ(test::raw_call(s, wire::op::section_checks, secret_ns).h.status, int32_t(wire::status::not_found));
  // The server goes on serving an honest client.
  auto link = server_link::connect(sock);
  EXPECT_EQ(link->info(link->lookup("graph")).bytes, graph::csr_file(graph_file.path()).header().file_bytes);
  close(s);
}

// Random section requests, mostly nonsense and some near the edges: each
// gets an answer (made, or refused with a reason), a section that was made
// lies inside its dataset, a writable one only where this client may write,
// and the server goes on serving an honest client.
TEST_F(Services, RandomSectionRequestsAreAnsweredAndNeverEscapeTheDataset) {
  const int s = test::raw_connect(sock);
  ASSERT_GE(s, 0);
  ASSERT_EQ(test::raw_call(s, wire::op::hello, 0, 0, 0, "random").h.status, 0);
  const uint32_t kvn = test::raw_call(s, wire::op::lookup, 0, 0, 0, "kv").h.a;
  const uint32_t gn = test::raw_call(s, wire::op::lookup, 0, 0, 0, "graph").h.a;
  const uint32_t vn = test::raw_call(s, wire::op::lookup, 0, 0, 0, "vectors").h.a;  // granted to everyone too
  const uint64_t gbytes = graph::csr_file(graph_file.path()).header().file_bytes;
  struct stat vst {};
  ASSERT_EQ(::stat(vectors_file.path().c_str(), &vst), 0);
  const uint64_t vbytes = uint64_t(vst.st_size);
  std::mt19937_64 rng(45);
  auto pick = [&](std::initializer_list<uint64_t> v) { return *(v.begin() + rng() % v.size()); };
  int made = 0;
  for (int i = 0; i < (test::scale_div > 1 ? 200 : 1000); ++i) {
    section_call c;
    c.dataset = uint32_t(pick({kvn, gn, 0, 4, 5, 999, uint32_t(rng())}));
    const uint64_t size = c.dataset == kvn ? kv_bytes : c.dataset == vn ? vbytes : gbytes;
    c.block = uint32_t(pick({512, 4096, 65536, 3000, 0, uint32_t(rng())}));
    c.flags = uint32_t(pick({0, 1, 1u << 8, 2u << 8, 1 | 2u << 8, 3u << 8, uint32_t(rng())}));
    c.sum_block = uint32_t(pick({4096, 512, 0, 1u << 20, uint32_t(rng())}));
    c.offset = pick({0, 4096, size - 4096, size, size + 4096, rng() % size, rng(), ~0ull - 4095});
    c.bytes = pick({4096, 65536, size, size - c.offset, 0, rng() % (size + 1), rng(), ~0ull});
    c.sums_offset = pick({0, size - 4096, rng() % size, rng(), ~0ull - 3});
    c.sums_bytes = pick({4, 4096, 65536, size, rng(), ~0ull});
    const wire::message r = open_section_raw(s, c);
    ASSERT_NE(r.h.status, -1) << "the server dropped the connection at request " << i;
    if (r.h.status != 0) {
      EXPECT_FALSE(r.text.empty()) << "a refusal without a reason";
      continue;
    }
    ++made;
    ASSERT_TRUE(c.dataset == kvn || c.dataset == gn || c.dataset == vn) << "a section of namespace " << c.dataset;
    ASSERT_LE(c.offset, size);
    ASSERT_LE(c.bytes, size - c.offset) << "a section past the end of its dataset";
    ASSERT_EQ(r.h.x, c.bytes);
    if (c.flags & 1) ASSERT_EQ(c.dataset, kvn) << "a writable section of a dataset granted for reading";
  }
  EXPECT_GT(made, 0) << "no request was a valid one: the test tried nothing";
  close(s);
  auto link = server_link::connect(sock);
  auto cache = make_host_page_cache(link, cache_cfg());
  graph::graph_arrays arrays(cache, graph::csr_file(graph_file.path()));
  graph::cpu_exec x(2);
  EXPECT_EQ(graph::bfs(x, arrays, {.source = 1}).depth, graph::bfs_reference(graph::view_of(g), 1));
}

TEST_F(Services, ASectionReadsItsRangeAndNothingPastIt) {
  auto link = server_link::connect(sock);
  const uint32_t kvn = link->open_dataset({"kv", true});
  // A writable section over bytes [8192, 8192 + 12288) of the kv file.
  section_request q;
  q.dataset = kvn;
  q.offset = 8192;
  q.bytes = 12288;
  q.writable = true;
  const uint32_t sec = link->open_section(q);
  EXPECT_EQ(link->info(sec).bytes, 12288u);
  host_queue_client io(link->open_queue_pair({8, 8, 65536}));
  const std::vector<uint8_t> before = test::read_all(kv.path());
  std::vector<uint8_t> buf(12288, 0xAB);
  ASSERT_TRUE(io.write(sec, 0, 3, 4096, buf.data()).ok());
  // Past its end: refused by the controller (out of range), not written.
  EXPECT_FALSE(io.write(sec, 3, 1, 4096, buf.data()).ok());
  ASSERT_TRUE(io.flush(sec).ok());
  const std::vector<uint8_t> after = test::read_all(kv.path());
  ASSERT_EQ(after.size(), before.size());
  for (uint64_t i = 0; i < after.size(); ++i) {
    if (i >= 8192 && i < 8192 + 12288)
      ASSERT_EQ(after[i], 0xAB) << i;
    else
      ASSERT_EQ(after[i], before[i]) << "byte " << i << " outside the section changed";
  }
}

TEST_F(Services, SectionsCountAgainstTheirUidsLimitsAndAreSharedWhenAlike) {
  stop();
  start("max_sections_per_uid = 3\n");
  auto link = server_link::connect(sock);
  const uint32_t gn = link->lookup("graph");
  auto ask = [&](uint64_t offset) {
    section_request q;
    q.dataset = gn;
    q.offset = offset;
    q.bytes = 4096;
    return link->open_section(q);
  };
  const uint32_t a = ask(0);
  EXPECT_EQ(ask(0), a) << "the same section again is the same namespace";
  ask(4096);
  ask(8192);
  test::expect_error([&] { ask(12288); }, "max_sections_per_uid");
  // Another connection of the uid meets the same limit while the first holds them.
  auto again = server_link::connect(sock);
  section_request q;
  q.dataset = gn;
  q.offset = 4096 * 7;
  q.bytes = 4096;
  test::expect_error([&] { again->open_section(q); }, "max_sections_per_uid");
  // Once no connection holds them, they make room: the oldest idle goes,
  // and its id serves the new section's bytes, not the old one's.
  link.reset();
  for (int i = 0; i < 500 && server_.get()->client_count() != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::vector<uint8_t> file_bytes = test::read_all(graph_file.path());
  host_queue_client io(again->open_queue_pair({8, 8, 4096}));
  std::vector<uint8_t> buf(4096);
  for (uint64_t k = 7; k < 10; ++k) {
    q.offset = 4096 * k;
    uint32_t sec = 0;
    ASSERT_NO_THROW(sec = again->open_section(q)) << "section " << k;
    ASSERT_TRUE(io.read(sec, 0, 1, 4096, buf.data()).ok()) << "section " << k;
    EXPECT_TRUE(std::equal(buf.begin(), buf.end(), file_bytes.begin() + long(q.offset))) << "section " << k;
  }
  // Those three are held now: the limit is on sections kept at once.
  q.offset = 4096 * 10;
  test::expect_error([&] { again->open_section(q); }, "max_sections_per_uid");
  const auto stats = nlohmann::json::parse(again->stats())["server"];
  EXPECT_EQ(stats["sections"].get<uint64_t>(), 3u);
  EXPECT_EQ(stats["sections_reclaimed"].get<uint64_t>(), 3u);
  // The sums' memory: the neighbours' fixed sums take more than 4 KiB of it.
  stop();
  start("max_section_sums_per_uid = \"4KiB\"\n");
  auto third = server_link::connect(sock);
  graph::csr_file file(graph_file.path());
  section_request big;
  big.dataset = third->lookup("graph");
  big.offset = file.section_at(graph::csr_section::neighbours);
  big.bytes = file.section_bytes(graph::csr_section::neighbours);
  big.sums = sums_kind::fixed;
  big.sums_offset = file.section_sums_at(graph::csr_section::neighbours);
  big.sums_bytes = 4 * section_sum_count(big.bytes);
  test::expect_error([&] { third->open_section(big); }, "max_section_sums_per_uid");
}

}  // namespace
