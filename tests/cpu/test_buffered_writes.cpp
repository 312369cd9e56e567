// Writes to page-cache files on the poller (targets/buffered_writes.hpp):
// merged writes put every page where it belongs, overlapping writes land in
// the order they were queued, a merged write that falls short gives each
// write its own answer; a thread engine's worker that writes a run of
// writes queued together with one call keeps the queued order of those that
// overlap; and through the io_uring engine each DEEPWELL_BUFFERED_WRITES
// mode writes the same bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <random>
#include <vector>

#include "deepwell/targets/io_engine.hpp"
#include "env_guard.hpp"
#include "io_test_support.hpp"
#include "targets/buffered_writes.hpp"
#include "targets/io_engines.hpp"

namespace deepwell::test {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t page = 4096;

struct file_fd {
  scratch_file file;
  int fd;
  file_fd() : fd(::open(file.path().c_str(), O_RDWR | O_CLOEXEC)) {}
  ~file_fd() {
    if (fd >= 0) ::close(fd);
  }
  std::vector<uint8_t> contents(size_t bytes) const {
    std::vector<uint8_t> v(bytes, 0);
    const ssize_t n = ::pread(fd, v.data(), bytes, 0);
    v.resize(n > 0 ? size_t(n) : 0);
    return v;
  }
};

io_op write_of(int fd, const void* buf, uint32_t len, uint64_t offset) {
  return io_transfer(io_op::write, fd, buf, len, offset);
}

// Runs `ops` through buffered_writes; returns each one's result.
std::vector<int64_t> run(std::vector<io_op>& ops, bool merge, detail::buffered_writes::slowest* worst = nullptr) {
  std::vector<io_op*> ptrs;
  for (auto& o : ops) ptrs.push_back(&o);
  std::vector<int64_t> results(ops.size(), 12345);
  detail::buffered_writes w;
  const auto s = w.run(ptrs.data(), results.data(), ptrs.size(), merge);
  if (worst) *worst = s;
  return results;
}

TEST(BufferedWrites, ShuffledAdjacentPagesMergeAndEveryPageLandsWhereItBelongs) {
  file_fd f;
  ASSERT_GE(f.fd, 0);
  constexpr unsigned pages = 300;  // more than one merged write's 1 MiB
  std::vector<uint8_t> data(size_t(pages) * page);
  fill_pattern(data.data(), data.size(), 0, io_seed);
  std::vector<io_op> ops;
  for (unsigned p = 0; p < pages; ++p)
    if (p % 7 != 3) ops.push_back(write_of(f.fd, &data[size_t(p) * page], page, uint64_t(p) * page));  // holes
  std::shuffle(ops.begin(), ops.end(), std::mt19937(7));
  detail::buffered_writes::slowest worst;
  const std::vector<int64_t> r = run(ops, true, &worst);
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], int64_t(page)) << "write " << i;
  EXPECT_EQ(worst.fd, f.fd);
  const std::vector<uint8_t> got = f.contents(data.size());
  ASSERT_EQ(got.size(), data.size());  // the last page is not a hole
  for (unsigned p = 0; p < pages; ++p) {
    const uint8_t* g = &got[size_t(p) * page];
    if (p % 7 == 3)
      EXPECT_TRUE(std::all_of(g, g + page, [](uint8_t b) { return b == 0; })) << "hole " << p << " was written";
    else
      EXPECT_EQ(std::memcmp(g, &data[size_t(p) * page], page), 0) << "page " << p;
  }
}

TEST(BufferedWrites, OverlappingWritesLandInTheOrderTheyWereQueued) {
  for (const bool merge : {true, false}) {
    file_fd f;
    ASSERT_GE(f.fd, 0);
    std::vector<uint8_t> a(2 * page, 'a'), b(page, 'b'), c(page, 'c'), d(page, 'd');
    // a covers pages 0-1, then b rewrites page 1, c page 0, d page 3
    // (sorted by offset c would come before a: it must still land after).
    std::vector<io_op> ops{write_of(f.fd, a.data(), 2 * page, 0), write_of(f.fd, b.data(), page, page),
                           write_of(f.fd, d.data(), page, 3 * page), write_of(f.fd, c.data(), page, 0)};
    const std::vector<int64_t> r = run(ops, merge);
    EXPECT_EQ(r, (std::vector<int64_t>{2 * page, page, page, page}));
    const std::vector<uint8_t> got = f.contents(4 * page);
    ASSERT_EQ(got.size(), 4u * page);
    EXPECT_EQ(got[0], 'c') << "merge " << merge;
    EXPECT_EQ(got[page], 'b') << "merge " << merge;
    EXPECT_EQ(got[2 * page], 0) << "merge " << merge;
    EXPECT_EQ(got[3 * page], 'd') << "merge " << merge;
  }
}

// One worker thread (a file's lane) taking writes queued together: those
// that continue one range go in one call, the others keep the queue's
// order, and writes that overlap land in the order they were queued.
TEST(ThreadEngineWrites, OneThreadKeepsTheQueuedOrderOfOverlappingWrites) {
  file_fd f;
  ASSERT_GE(f.fd, 0);
  std::vector<uint8_t> a(2 * page, 'a'), b(page, 'b'), c(page, 'c'), d(page, 'd'), e(page, 'e'), g(page, 'g'),
      x(page, 'x');
  auto io = detail::make_thread_engine(64, 1);
  struct landed {
    int64_t result = -1;
    static void on(void* p, int64_t r) { static_cast<landed*>(p)->result = r; }
  } res[7];
  // Pages 0-1 (a), 4 (e), 2 (b), 1 again (c: overlaps a), 3 (d), 0 again
  // (g), 6 (x, after a gap). Taken with a, the others overlap it: a goes
  // alone. Taken with e, pages 0-4 make one range (g, c, b, d, e) and x
  // goes back, then alone.
  const std::pair<const uint8_t*, std::pair<uint32_t, uint64_t>> w[7] = {
      {a.data(), {2 * page, 0}}, {e.data(), {page, 4 * page}}, {b.data(), {page, 2 * page}},
      {c.data(), {page, page}},  {d.data(), {page, 3 * page}}, {g.data(), {page, 0}},
      {x.data(), {page, 6 * page}}};
  for (int i = 0; i < 7; ++i) {
    io_op op = write_of(f.fd, w[i].first, w[i].second.first, w[i].second.second);
    op.done = {&landed::on, &res[i]};
    io->queue(op);
  }
  io->submit();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (io->in_flight() && std::chrono::steady_clock::now() < until) {
    io->wait(1000000);
    io->reap();
  }
  ASSERT_EQ(io->in_flight(), 0u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(res[i].result, int64_t(w[i].second.first)) << "write " << i;
  const std::vector<uint8_t> got = f.contents(7 * page);
  ASSERT_EQ(got.size(), 7u * page);
  EXPECT_EQ(got[0], 'g');
  EXPECT_EQ(got[page], 'c');
  EXPECT_EQ(got[2 * page], 'b');
  EXPECT_EQ(got[3 * page], 'd');
  EXPECT_EQ(got[4 * page], 'e');
  EXPECT_EQ(got[5 * page], 0);
  EXPECT_EQ(got[6 * page], 'x');
}

TEST(BufferedWrites, AMergedWriteThatFallsShortAnswersEachWriteOnItsOwn) {
  file_fd f;
  ASSERT_GE(f.fd, 0);
  // A file size limit inside the merged range: the pages below it are
  // written and say so, the ones above fail with EFBIG (the signal ignored).
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit lim = old;
  lim.rlim_cur = 4 * page;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::vector<uint8_t> data(8 * page, 'x');
  std::vector<io_op> ops;
  for (unsigned p = 0; p < 8; ++p) ops.push_back(write_of(f.fd, &data[p * page], page, uint64_t(p) * page));
  const std::vector<int64_t> r = run(ops, true);
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  for (unsigned p = 0; p < 4; ++p) EXPECT_EQ(r[p], int64_t(page)) << "page " << p;
  for (unsigned p = 4; p < 8; ++p) EXPECT_EQ(r[p], -EFBIG) << "page " << p;
  EXPECT_EQ(f.contents(8 * page).size(), 4u * page);
}

TEST(BufferedWrites, AWriteToABadDescriptorIsAnErrorNotACrash) {
  std::vector<uint8_t> data(page, 1);
  std::vector<io_op> ops{write_of(-1, data.data(), page, 0), write_of(9999, data.data(), page, page)};
  const std::vector<int64_t> r = run(ops, true);
  EXPECT_EQ(r[0], -EBADF);
  EXPECT_EQ(r[1], -EBADF);
}

// Through the engine: random page writes, many to the same pages, queued in
// passes as a poller would; the file ends as the last write of each page
// left it, in every mode.
class BufferedWriteModes : public testing::TestWithParam<const char*> {};

TEST_P(BufferedWriteModes, TheLastWriteOfEachPageWinsInEveryMode) {
  if (!io_uring_available()) GTEST_SKIP() << "io_uring is unavailable here";
  env_var_guard guard("DEEPWELL_BUFFERED_WRITES");
  setenv("DEEPWELL_BUFFERED_WRITES", GetParam(), 1);
  file_fd f;
  ASSERT_GE(f.fd, 0);
  constexpr unsigned pages = 64, writes = 4000;
  auto io = make_io_engine(io_backend::uring, 128);
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> bufs(writes, std::vector<uint8_t>(page));
  std::vector<completion> done(writes);
  std::vector<int> last(pages, -1);
  for (unsigned i = 0; i < writes;) {
    // A pass: some writes, then submit; each page at most once in flight,
    // as the cache writes a page back once at a time.
    std::vector<bool> busy(pages, false);
    const unsigned n = 1 + rng() % 48;
    for (unsigned k = 0; k < n && i < writes; ++k, ++i) {
      unsigned p = rng() % pages;
      if (busy[p]) continue;
      busy[p] = true;
      std::fill(bufs[i].begin(), bufs[i].end(), uint8_t(i * 31 + 7));
      io_op op = write_of(f.fd, bufs[i].data(), page, uint64_t(p) * page);
      op.done = done[i].callback();
      io->queue(op);
      last[p] = int(i);
    }
    io->submit();
    ASSERT_TRUE(drive(*io, [&] { return io->in_flight() == 0; }, 10000ms));
  }
  const std::vector<uint8_t> got = f.contents(size_t(pages) * page);
  for (unsigned p = 0; p < pages; ++p) {
    if (last[p] < 0) continue;
    ASSERT_GE(got.size(), size_t(p + 1) * page);
    EXPECT_EQ(got[size_t(p) * page], uint8_t(last[p] * 31 + 7)) << "page " << p;
    EXPECT_EQ(got[size_t(p) * page + page - 1], uint8_t(last[p] * 31 + 7)) << "page " << p;
  }
  for (unsigned i = 0; i < writes; ++i)
    if (done[i].calls) EXPECT_EQ(done[i].result, int64_t(page)) << "write " << i;
}

INSTANTIATE_TEST_SUITE_P(Modes, BufferedWriteModes, testing::Values("lane", "inline", "merged"),
                         [](const testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace deepwell::test
