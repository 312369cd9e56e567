// Arrays of drives (deepwell/targets/drive_array.hpp): striped namespaces of
// chunk and page geometries the standing integrity test's cases do not
// cover, under its rounds (random reads and writes from many threads through
// a cache of about 5%, a flush, then every member re-read with plain pread
// and checked word by word where its bytes belong); a mirror whose every
// member fails; bad configurations; the modelled drive keeps its bytes and
// its pace; the server's TOML arrays. (Stripes split over 2 and 3 files and
// mirrors, one losing a member mid-run: tests/cpu/test_integrity.cpp.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/integrity.hpp"
#include "deepwell/link/server_link.hpp"
#include "cache_test_support.hpp"
#include "server_test_support.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

// Member files: empty scratch files filled by the test.
struct members {
  std::vector<std::unique_ptr<test::scratch_file>> files;
  explicit members(unsigned n) {
    for (unsigned i = 0; i < n; ++i) files.push_back(std::make_unique<test::scratch_file>());
  }
  void write(unsigned m, const void* data, uint64_t bytes, uint64_t at) const {
    const int fd = ::open(files[m]->path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, data, bytes, off_t(at)), ssize_t(bytes));
    ::close(fd);
  }
  std::vector<uint8_t> read(unsigned m, uint64_t bytes) const {
    std::vector<uint8_t> out(bytes);
    const int fd = ::open(files[m]->path().c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(pread(fd, out.data(), bytes, 0), ssize_t(bytes));
    ::close(fd);
    return out;
  }
  std::vector<std::shared_ptr<target>> targets() const {
    std::vector<std::shared_ptr<target>> t;
    for (const auto& f : files) t.push_back(open_file_target(f->path(), {.writable = true}));
    return t;
  }
};

std::vector<uint64_t> original_words(uint64_t words) {
  std::vector<uint64_t> w(words);
  for (uint64_t i = 0; i < words; ++i) w[i] = test::original_word(i);
  return w;
}

// The integrity rounds on namespace `ns` of `ctl`: three rounds of 8
// threads with a flush between the last two, then a flush. Returns the
// written-words bitmap; counts in `counts`.
std::vector<uint32_t> run_rounds(controller& ctl, uint32_t ns, uint32_t page, uint64_t words,
                                 test::integrity_counts& counts, std::shared_ptr<page_cache>* keep = nullptr) {
  cache_config cc;
  cc.page_size = page;
  cc.capacity_bytes = std::max<uint64_t>(words * 8 / 20, 64ull * page);
  cc.queue_pairs = 4;
  cc.queue_entries = 64;
  cc.direct_files = cache_config::file_tier::never;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  const array_ref<uint64_t> ra = a.ref();
  std::vector<uint32_t> written((words + 31) / 32, 0);
  counts = {};
  const unsigned threads = 8;
  const uint32_t ops = uint32_t(4000 / test::scale_div);
#if defined(DEEPWELL_TSAN_BUILD)
  const uint32_t lanes = threads;
#else
  const uint32_t lanes = 1;
#endif
  for (uint32_t round = 0; round < 3; ++round) {
    std::vector<std::thread> pool;
    for (unsigned th = 0; th < threads; ++th)
      pool.emplace_back([&, th] {
        test::integrity_round(one_lane{}, ra, ra, round * 1000 + th, ops, 33, written.data(), &counts, lanes, th);
      });
    for (auto& th : pool) th.join();
    if (round == 1) EXPECT_TRUE(test::until_no_timeout([&] { return cache->flush(); }).ok());
  }
  const request_status r = test::until_no_timeout([&] { return cache->flush(); });
  EXPECT_TRUE(r.ok()) << describe(r);
  if (keep) *keep = cache;
  return written;
}

struct stripe_case {
  const char* name;
  unsigned members;
  uint64_t chunk;
  uint32_t page;  // pages larger than a chunk: each read and write split over members
};

class Striped : public testing::TestWithParam<stripe_case> {};

}  // namespace

TEST_P(Striped, RandomReadsAndWritesLandOnTheirMembers) {
  const stripe_case& c = GetParam();
  const uint64_t member_bytes = (1ull << 20) / (test::scale_div > 1 ? 2 : 1);
  const uint64_t bytes = member_bytes * c.members, words = bytes / 8;
  members m(c.members);
  const std::vector<uint64_t> orig = original_words(words);
  // Chunk k of the dataset is chunk k / members of member k % members.
  for (uint64_t k = 0; k < bytes / c.chunk; ++k)
    m.write(unsigned(k % c.members), reinterpret_cast<const uint8_t*>(orig.data()) + k * c.chunk, c.chunk,
            k / c.members * c.chunk);
  controller_config cfg;
  cfg.pollers = 2;
  controller ctl(cfg);
  auto t = make_striped_target(m.targets(), c.chunk);
  ASSERT_EQ(t->size(), bytes);
  const uint32_t ns = ctl.add_namespace({t, 512, false});
  test::integrity_counts counts{};
  const std::vector<uint32_t> written = run_rounds(ctl, ns, c.page, words, counts);
  EXPECT_EQ(counts.wrong, 0u) << "first wrong word " << counts.first_wrong;
  EXPECT_EQ(counts.failed, 0u);
  EXPECT_GT(counts.writes, 0u);
  // Every member, with plain reads, where its chunks belong.
  std::vector<std::vector<uint8_t>> files;
  for (unsigned i = 0; i < c.members; ++i) files.push_back(m.read(i, member_bytes));
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t b = i * 8, k = b / c.chunk;
    uint64_t v;
    std::memcpy(&v, files[k % c.members].data() + k / c.members * c.chunk + b % c.chunk, 8);
    if (v != test::final_word(written.data(), i) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << "first wrong word on the members: " << first;
}

INSTANTIATE_TEST_SUITE_P(Cases, Striped,
                         testing::Values(stripe_case{"four_members_pages_inside_chunks", 4, 16384, 4096},
                                         stripe_case{"three_members_pages_across_chunks", 3, 4096, 16384}),
                         [](const testing::TestParamInfo<stripe_case>& i) { return std::string(i.param.name); });

TEST(Striped, BadConfigurationsAreRefusedByName) {
  members m(2);
  for (unsigned i = 0; i < 2; ++i) {
    std::vector<uint8_t> z(65536, 0);
    m.write(i, z.data(), z.size(), 0);
  }
  test::expect_error([&] { make_striped_target({}, 4096); }, "no members");
  test::expect_error([&] { make_striped_target(m.targets(), 3000); }, "power of two");
  test::expect_error([&] { make_striped_target(m.targets(), 256); }, "power of two");
  test::expect_error([&] { make_striped_target({m.targets()[0], nullptr}, 4096); }, "member 1 is null");
  test::expect_error([&] { make_striped_target(m.targets(), 1 << 20); }, "smaller than one chunk");
}

namespace {

// A mirror of `n` member files holding the original words, its member
// `failing` (if any) behind a fault target.
struct mirror_setup {
  members m;
  std::shared_ptr<fault_target> faults;
  std::shared_ptr<mirror_target> mirror;
  mirror_setup(unsigned n, uint64_t bytes, int failing) : m(n) {
    const std::vector<uint64_t> orig = original_words(bytes / 8);
    std::vector<std::shared_ptr<target>> t = m.targets();
    for (unsigned i = 0; i < n; ++i) m.write(i, orig.data(), bytes, 0);
    t = m.targets();
    if (failing >= 0) {
      faults = make_fault_target(t[failing]);
      t[failing] = faults;
    }
    mirror = make_mirrored_target(t);
  }
};

}  // namespace

// A mirror's rounds under eviction, every member re-read, and one member
// failing mid-run: the standing integrity test's mirror cases
// (tests/cpu/test_integrity.cpp, Cases/Integrity.*/mirror*).

TEST(Mirrored, WhenEveryMemberFailsTheErrorReachesTheClient) {
  const uint64_t bytes = 1 << 20;
  mirror_setup s(1, bytes, 0);
  s.faults->add_rule({.kind = fault_rule::fail_read});
  controller ctl;
  const uint32_t ns = ctl.add_namespace({s.mirror, 4096, false});
  cache_config cc;
  cc.page_size = 4096;
  cc.capacity_bytes = 64 * 4096;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  request_status st;
  (void)a.ref().try_read(17, &st);
  EXPECT_FALSE(st.ok()) << "a read no member could serve";
  EXPECT_EQ(s.mirror->failed_members(), 1u);
}

TEST(Mirrored, BadConfigurationsAreRefusedByName) {
  test::expect_error([&] { make_mirrored_target({}); }, "no members");
  auto rw = make_host_memory_target(1 << 20, true), ro = make_host_memory_target(1 << 20, false);
  test::expect_error([&] { make_mirrored_target({rw, nullptr}); }, "member 1 is null");
  test::expect_error([&] { make_mirrored_target({rw, ro}); }, "writability");
}

TEST(ModelDrive, KeepsItsBytesAndItsPace) {
  drive_model dm;
  dm.iops = 20'000;  // 50 us a command: 400 commands take 20 ms at the least
  dm.latency_ns = 200'000;
  dm.tail = 0.5;
  const uint64_t bytes = 4 << 20;
  controller ctl;
  auto t = make_model_drive_target(bytes, dm);
  const uint32_t ns = ctl.add_namespace({t, 4096, false});
  cache_config cc;
  cc.page_size = 4096;
  cc.capacity_bytes = 64 * 4096;
  cc.queue_entries = 256;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  const auto r = a.ref();
  for (uint64_t i = 0; i < bytes / 8; i += 512) ASSERT_TRUE(r.write(one_lane{}, i, i * 7 + 1).ok());
  ASSERT_TRUE(test::until_no_timeout([&] { return cache->flush(); }).ok());
  ASSERT_TRUE(test::until_no_timeout([&] { return cache->clear(); }).ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  std::atomic<uint64_t> bad{0};
  for (unsigned th = 0; th < 4; ++th)
    pool.emplace_back([&, th] {
      for (uint64_t i = th * 512; i < bytes / 8; i += 4 * 512)
        if (r[i] != i * 7 + 1) ++bad;
    });
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(bad.load(), 0u);
  // 1024 page reads at 20 K IOPS: at least 51 ms, whatever the clients do.
  EXPECT_GE(secs, 0.051) << "the model's IOPS bound the reads";
  test::expect_error([&] { make_model_drive_target(bytes, drive_model{.iops = 0}); }, "iops");
}

// Under `deepwell serve`: a stripe and a mirror declared in the TOML config
// serve their bytes to a client, and a client's writes land on the members.
TEST(DriveArrayServer, StripedAndMirroredDatasetsServeTheirBytes) {
  const uint64_t member_bytes = 256 << 10, chunk = 16384;
  test::scratch_file s0(member_bytes, 31), s1(member_bytes, 32), m0(member_bytes, 33), m1(member_bytes, 33);
  const std::string sock = "/tmp/deepwell-test-array-" + std::to_string(getpid()) + ".sock";
  const std::string uid = std::to_string(getuid());
  test::server_thread srv;
  srv.start("[server]\nsocket = \"" + sock + "\"\npollers = 2\n" +
            "[[dataset]]\nname = \"s\"\nstripe = [\"" + s0.path() + "\", \"" + s1.path() + "\"]\nchunk = \"16KiB\"\n" +
            "writable = true\n" +
            "[[dataset]]\nname = \"m\"\nmirror = [\"" + m0.path() + "\", \"" + m1.path() + "\"]\n" +
            "[[grant]]\ndataset = \"*\"\nuid = " + uid + "\naccess = \"read-write\"\n");
  for (int i = 0; i < 200 && access(sock.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto link = server_link::connect(sock, "array-client");
  cache_config cc = test::small_cache(16);
  cc.direct_tier = false;
  {
    const uint32_t ns = link->lookup("s");
    ASSERT_EQ(link->info(ns).bytes, 2 * member_bytes);
    array<uint64_t> a(make_host_page_cache(link, cc), ns);
    const auto r = a.ref();
    for (uint64_t i = 0; i < a.size(); i += 3) {
      const uint64_t b = i * 8, k = b / chunk;
      const uint64_t at = k / 2 * chunk + b % chunk;
      ASSERT_EQ(r[i], test::pattern_word(at, k % 2 ? 32 : 31)) << "word " << i;
    }
    for (uint64_t i = 0; i < a.size(); i += 1001) ASSERT_TRUE(r.write(one_lane{}, i, ~i).ok());
    ASSERT_TRUE(a.cache().flush().ok());
    const std::vector<uint64_t> f0 = test::file_words(s0.path(), member_bytes), f1 = test::file_words(s1.path(), member_bytes);
    for (uint64_t i = 0; i < a.size(); i += 1001) {
      const uint64_t b = i * 8, k = b / chunk;
      EXPECT_EQ((k % 2 ? f1 : f0)[(k / 2 * chunk + b % chunk) / 8], ~i) << "word " << i << " on its member";
    }
  }
  {
    const uint32_t ns = link->lookup("m");
    ASSERT_EQ(link->info(ns).bytes, member_bytes);
    EXPECT_FALSE(link->may_write(ns));
    array<uint64_t> a(make_host_page_cache(link, cc), ns);
    const auto r = a.ref();
    for (uint64_t i = 0; i < a.size(); i += 5) ASSERT_EQ(r[i], test::pattern_word(i * 8, 33)) << "word " << i;
  }
  srv.stop();
}
