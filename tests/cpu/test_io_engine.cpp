// io_engine: both backends give the same results (bytes or -errno) for
// reads, writes, fsync and timers, never lose an operation (even far beyond
// the queue depth), put every page of shuffled runs of adjacent writes where
// it belongs, and shut down without hanging.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/io_engine.hpp"
#include "env_guard.hpp"
#include "io_test_support.hpp"

namespace deepwell::test {
namespace {

using steady = std::chrono::steady_clock;

// An open descriptor, closed at the end of the test.
struct open_fd {
  int fd;
  open_fd(const std::string& path, int flags) : fd(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {}
  ~open_fd() {
    if (fd >= 0) ::close(fd);
  }
};

io_op read_op(int fd, void* buf, uint32_t len, uint64_t offset, completion& c) {
  io_op op = io_transfer(io_op::read, fd, buf, len, offset);
  op.done = c.callback();
  return op;
}

io_op write_op(int fd, const void* buf, uint32_t len, uint64_t offset, completion& c) {
  io_op op = io_transfer(io_op::write, fd, buf, len, offset);
  op.done = c.callback();
  return op;
}

io_op fsync_op(int fd, completion& c) {
  io_op op;
  op.kind = io_op::fsync;
  op.fd = fd;
  op.done = c.callback();
  return op;
}

io_op timer_op(uint64_t ns, completion& c) {
  io_op op;
  op.kind = io_op::timer;
  op.delay_ns = ns;
  op.done = c.callback();
  return op;
}

bool all_done(const std::vector<completion>& cs) {
  for (auto& c : cs)
    if (!c.done()) return false;
  return true;
}

class io_engine_test : public per_backend {};

TEST_P(io_engine_test, NameMatchesBackend) {
  auto io = make_engine();
  EXPECT_STREQ(io->name(), GetParam() == io_backend::uring ? "io_uring" : "threads");
  EXPECT_EQ(io->in_flight(), 0u);
}

TEST_P(io_engine_test, WriteFsyncReadRoundTrip) {
  scratch_file f;
  open_fd file(f.path(), O_RDWR);
  ASSERT_GE(file.fd, 0);
  auto io = make_engine();
  const auto data = pattern_bytes(65536, 4096, io_seed);

  completion w, s, r;
  io->queue(write_op(file.fd, data.data(), 65536, 4096, w));
  ASSERT_TRUE(drive(*io, w));
  EXPECT_EQ(w.result, 65536);
  io->queue(fsync_op(file.fd, s));
  ASSERT_TRUE(drive(*io, s));
  EXPECT_EQ(s.result, 0);

  std::vector<uint8_t> back(65536);
  io->queue(read_op(file.fd, back.data(), 65536, 4096, r));
  ASSERT_TRUE(drive(*io, r));
  EXPECT_EQ(r.result, 65536);
  EXPECT_EQ(check_pattern(back.data(), back.size(), 4096, io_seed), -1);
  EXPECT_EQ(read_file(f.path(), 4096, 65536), data);
  EXPECT_EQ(io->in_flight(), 0u);
  EXPECT_EQ(w.calls + s.calls + r.calls, 3u);
}

TEST_P(io_engine_test, DsyncWriteFlagIsPassedThrough) {
  scratch_file f;
  open_fd file(f.path(), O_RDWR);
  auto io = make_engine();
  const auto data = pattern_bytes(4096, 0, io_seed);
  completion w;
  io_op op = write_op(file.fd, data.data(), 4096, 0, w);
  op.rw_flags = RWF_DSYNC;
  io->queue(op);
  ASSERT_TRUE(drive(*io, w));
  EXPECT_EQ(w.result, 4096);
  EXPECT_EQ(read_file(f.path(), 0, 4096), data);

  completion bad;
  op = write_op(file.fd, data.data(), 4096, 0, bad);
  op.rw_flags = 0x40000000;  // no such RWF_ flag
  io->queue(op);
  ASSERT_TRUE(drive(*io, bad));
  EXPECT_LT(bad.result, 0);
}

TEST_P(io_engine_test, ShortReadAtEndOfFileReportsBytes) {
  scratch_file f;
  const auto data = pattern_bytes(1000, 0, io_seed);
  write_file(f.path(), data.data(), data.size());
  open_fd file(f.path(), O_RDONLY);
  auto io = make_engine();
  std::vector<uint8_t> buf(4096);
  completion a, b;
  io->queue(read_op(file.fd, buf.data(), 4096, 0, a));
  io->queue(read_op(file.fd, buf.data(), 4096, 5000, b));
  ASSERT_TRUE(drive(*io, [&] { return a.done() && b.done(); }));
  EXPECT_EQ(a.result, 1000);
  EXPECT_EQ(b.result, 0);
}

TEST_P(io_engine_test, ErrorsComeBackAsNegativeErrno) {
  scratch_file f;
  open_fd ro(f.path(), O_RDONLY);
  auto io = make_engine();
  char buf[512] = {};
  completion bad_fd, read_only, huge_offset, bad_sync;
  io->queue(read_op(-1, buf, sizeof buf, 0, bad_fd));
  io->queue(write_op(ro.fd, buf, sizeof buf, 0, read_only));
  io->queue(read_op(ro.fd, buf, sizeof buf, UINT64_MAX, huge_offset));
  io->queue(fsync_op(-1, bad_sync));
  ASSERT_TRUE(drive(*io, [&] { return bad_fd.done() && read_only.done() && huge_offset.done() && bad_sync.done(); }));
  EXPECT_EQ(bad_fd.result, -EBADF);
  EXPECT_EQ(read_only.result, -EBADF);
  EXPECT_EQ(huge_offset.result, -EINVAL);
  EXPECT_EQ(bad_sync.result, -EBADF);
}

TEST_P(io_engine_test, TimerWaitsItsDelay) {
  auto io = make_engine();
  completion t, zero;
  auto start = steady::now();
  io->queue(timer_op(20'000'000, t));
  io->queue(timer_op(0, zero));
  ASSERT_TRUE(drive(*io, [&] { return t.done() && zero.done(); }));
  auto elapsed = steady::now() - start;
  EXPECT_EQ(t.result, 0);  // not -ETIME
  EXPECT_EQ(zero.result, 0);
  EXPECT_GE(elapsed, 20ms);
  EXPECT_LT(elapsed, 2000ms);
}

TEST_P(io_engine_test, WaitReturnsAtOnceWhenIdleAndWakesOnCompletion) {
  auto io = make_engine();
  auto start = steady::now();
  io->wait(2'000'000'000);
  EXPECT_LT(steady::now() - start, 500ms);

  completion t;
  io->queue(timer_op(5'000'000, t));
  io->submit();
  start = steady::now();
  while (!t.done() && steady::now() - start < 5s) {
    io->wait(2'000'000'000);
    io->reap();
  }
  EXPECT_TRUE(t.done());
  EXPECT_LT(steady::now() - start, 1000ms);
}

// Many reads and writes in flight at once, far more than the queue depth,
// every byte checked: reads against the pattern, writes by reading the
// file back.
TEST_P(io_engine_test, ManyConcurrentRandomOpsAreByteExact) {
  constexpr uint64_t source_bytes = 4 << 20;
  constexpr unsigned ops = 10000;
  constexpr uint32_t max_len = 2048;
  scratch_file src, dst;
  write_file(src.path(), pattern_bytes(source_bytes, 0, io_seed).data(), source_bytes);
  open_fd in(src.path(), O_RDONLY), out(dst.path(), O_RDWR);
  ASSERT_GE(in.fd, 0);
  ASSERT_GE(out.fd, 0);

  std::mt19937_64 rng(12345);
  struct planned {
    bool write;
    uint64_t offset;
    uint32_t len;
  };
  std::vector<planned> plan(ops);
  std::vector<uint8_t> buffers(uint64_t(ops) * max_len);
  for (unsigned i = 0; i < ops; ++i) {
    auto& p = plan[i];
    p.write = i % 4 == 0;
    p.len = 1 + rng() % max_len;
    // Writes go to disjoint slots of the destination; reads anywhere.
    p.offset = p.write ? uint64_t(i) * max_len : rng() % (source_bytes - p.len + 1);
    if (p.write) fill_pattern(&buffers[uint64_t(i) * max_len], p.len, p.offset, io_seed);
  }

  auto io = make_engine(128);
  std::vector<completion> done(ops);
  for (unsigned i = 0; i < ops; ++i) {
    auto& p = plan[i];
    uint8_t* buf = &buffers[uint64_t(i) * max_len];
    io->queue(p.write ? write_op(out.fd, buf, p.len, p.offset, done[i]) : read_op(in.fd, buf, p.len, p.offset, done[i]));
    if (i % 1000 == 999) io->submit();  // some go early, most pile up
  }
  EXPECT_GT(io->in_flight(), 0u);
  ASSERT_TRUE(drive(*io, [&] { return all_done(done); }, 30000ms));
  EXPECT_EQ(io->in_flight(), 0u);

  std::vector<uint8_t> written(uint64_t(ops) * max_len);
  ASSERT_GT(pread(out.fd, written.data(), written.size(), 0), 0);
  for (unsigned i = 0; i < ops; ++i) {
    auto& p = plan[i];
    ASSERT_EQ(done[i].calls, 1u) << "op " << i;
    ASSERT_EQ(done[i].result, p.len) << "op " << i;
    const uint8_t* got = p.write ? &written[p.offset] : &buffers[uint64_t(i) * max_len];
    ASSERT_EQ(check_pattern(got, p.len, p.offset, io_seed), -1) << (p.write ? "write " : "read ") << i;
  }
}

// Runs of adjacent pages queued together, each run shuffled (as a warp's
// lanes submit them), with gaps between runs, a read among them, to a
// buffered file and, where the file system takes it, an O_DIRECT one:
// writes to regular files go to worker threads that write a run with one
// vectored call. Every write answers its own length and every page lands
// where it belongs; the pages of the gaps stay unwritten.
TEST_P(io_engine_test, ShuffledRunsOfAdjacentWritesLandByteForByte) {
  constexpr uint32_t page = 4096;
  constexpr unsigned runs = 8, run_pages = 40, stride = run_pages + 3;  // 3 pages of gap after each run
  constexpr uint64_t bytes = uint64_t(runs) * stride * page;
  for (const bool direct : {false, true}) {
    scratch_file f;
    open_fd file(f.path(), O_RDWR | (direct ? O_DIRECT : 0));
    if (file.fd < 0 && direct) continue;  // no O_DIRECT here (tmpfs)
    ASSERT_GE(file.fd, 0);
    ASSERT_EQ(::ftruncate(file.fd, off_t(bytes)), 0);
    aligned_buffer data(bytes), back(page);
    fill_pattern(data.get(), bytes, 0, io_seed);
    std::vector<uint64_t> order;
    std::mt19937 rng(11);
    for (unsigned r = 0; r < runs; ++r) {
      std::vector<uint64_t> run;
      for (unsigned p = 0; p < run_pages; ++p) run.push_back(uint64_t(r) * stride + p);
      std::shuffle(run.begin(), run.end(), rng);
      order.insert(order.end(), run.begin(), run.end());
    }
    auto io = make_engine(512);
    std::vector<completion> done(order.size());
    completion read;
    for (size_t i = 0; i < order.size(); ++i) {
      const uint64_t at = order[i] * page;
      io->queue(write_op(file.fd, data.get() + at, page, at, done[i]));
      if (i == order.size() / 2) io->queue(read_op(file.fd, back.get(), page, bytes - page, read));
    }
    ASSERT_TRUE(drive(*io, [&] { return all_done(done) && read.done(); }, 30000ms));
    EXPECT_EQ(read.result, int64_t(page));
    for (size_t i = 0; i < done.size(); ++i) ASSERT_EQ(done[i].result, int64_t(page)) << "write " << i;
    const std::vector<uint8_t> got = read_file(f.path(), 0, bytes);
    for (uint64_t p = 0; p < bytes / page; ++p) {
      const uint8_t* g = got.data() + p * page;
      if (p % stride < run_pages)
        ASSERT_EQ(std::memcmp(g, data.get() + p * page, page), 0) << "page " << p << (direct ? " (O_DIRECT)" : "");
      else
        ASSERT_TRUE(std::all_of(g, g + page, [](uint8_t b) { return b == 0; })) << "gap page " << p << " was written";
    }
  }
}

TEST_P(io_engine_test, OverflowBeyondRingDepthLosesNothing) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(65536, 0, io_seed).data(), 65536);
  open_fd file(f.path(), O_RDONLY);
  auto io = make_engine(4);
  constexpr unsigned n = 600;
  std::vector<completion> done(n);
  std::vector<uint64_t> words(n);
  for (unsigned i = 0; i < n; ++i) {
    if (i % 3 == 2)
      io->queue(timer_op(0, done[i]));
    else
      io->queue(read_op(file.fd, &words[i], 8, uint64_t(i % 8192) * 8, done[i]));
  }
  EXPECT_EQ(io->in_flight(), n);
  ASSERT_TRUE(drive(*io, [&] { return all_done(done); }));
  EXPECT_EQ(io->in_flight(), 0u);
  for (unsigned i = 0; i < n; ++i) {
    EXPECT_EQ(done[i].calls, 1u);
    if (i % 3 == 2) {
      EXPECT_EQ(done[i].result, 0);
    } else {
      EXPECT_EQ(done[i].result, 8);
      EXPECT_EQ(words[i], pattern_word(uint64_t(i % 8192) * 8, io_seed));
    }
  }
}

// A callback may queue the next operation (as a target does after a short
// transfer).
TEST_P(io_engine_test, CallbacksCanQueueMoreWork) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(8192, 0, io_seed).data(), 8192);
  open_fd file(f.path(), O_RDONLY);
  auto io = make_engine(2);
  struct chain {
    io_engine* io;
    int fd;
    uint64_t word = 0;
    unsigned remaining = 200;
    unsigned finished = 0;
    bool ok = true;
    void next() {
      io_op op;
      op.kind = io_op::read;
      op.fd = fd;
      op.buf = &word;
      op.len = 8;
      op.offset = uint64_t(remaining) * 8;
      op.done = {&on_done, this};
      io->queue(op);
    }
    static void on_done(void* ctx, int64_t r) {
      auto* c = static_cast<chain*>(ctx);
      c->ok = c->ok && r == 8 && c->word == pattern_word(uint64_t(c->remaining) * 8, io_seed);
      ++c->finished;
      if (--c->remaining > 0) c->next();
    }
  } c{io.get(), file.fd};
  c.next();
  ASSERT_TRUE(drive(*io, [&] { return c.remaining == 0; }));
  EXPECT_EQ(c.finished, 200u);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(io->in_flight(), 0u);
}

TEST_P(io_engine_test, FixedBufferReadsWithOrWithoutRegistration) {
  constexpr size_t bytes = 256 << 10;
  scratch_file f;
  write_file(f.path(), pattern_bytes(bytes, 0, io_seed).data(), bytes);
  open_fd file(f.path(), O_RDONLY);
  auto io = make_engine();
  aligned_buffer buf(bytes);
  iovec iov{buf.get(), bytes};
  bool registered = io->register_buffers(&iov, 1);
  if (GetParam() == io_backend::threads) EXPECT_FALSE(registered);
  RecordProperty("registered", registered ? "yes" : "no");

  auto read_all = [&](int buf_index) {
    std::memset(buf.get(), 0, bytes);
    std::vector<completion> done(bytes / 4096);
    for (size_t i = 0; i < done.size(); ++i) {
      io_op op = read_op(file.fd, buf.get() + i * 4096, 4096, i * 4096, done[i]);
      op.buf_index = buf_index;
      io->queue(op);
    }
    ASSERT_TRUE(drive(*io, [&] { return all_done(done); }));
    for (auto& c : done) EXPECT_EQ(c.result, 4096);
    EXPECT_EQ(check_pattern(buf.get(), bytes, 0, io_seed), -1);
  };
  read_all(0);
  io->unregister_buffers();
  read_all(0);  // index without registration: plain reads
  read_all(-1);

  // A registration the kernel refuses leaves the engine working.
  iovec bogus{nullptr, size_t(1) << 40};
  EXPECT_FALSE(io->register_buffers(&bogus, 1));
  read_all(0);
}

TEST_P(io_engine_test, DestroyWithOperationsInFlightDoesNotHang) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(65536, 0, io_seed).data(), 65536);
  open_fd file(f.path(), O_RDONLY);
  std::vector<completion> done(200);
  std::vector<uint8_t> buf(200 * 512);
  auto start = steady::now();
  {
    auto io = make_engine(16);
    for (unsigned i = 0; i < 100; ++i) io->queue(read_op(file.fd, &buf[i * 512], 512, i * 512, done[i]));
    io->submit();
    for (unsigned i = 100; i < 199; ++i) io->queue(read_op(file.fd, &buf[i * 512], 512, i * 512, done[i]));
    io->queue(timer_op(60'000'000'000ull, done[199]));  // a minute: must not be waited for
    io->submit();
  }
  EXPECT_LT(steady::now() - start, 5s);
  EXPECT_EQ(done[199].calls, 0u);
}

INSTANTIATE_TEST_SUITE_P(backends, io_engine_test, testing::Values(io_backend::uring, io_backend::threads),
                         backend_param_name());

// ---- choosing a backend ----

TEST(io_backend_choice, FromEnvironment) {
  env_var_guard guard("DEEPWELL_IO");
  unsetenv("DEEPWELL_IO");
  EXPECT_EQ(backend_from_env(), io_backend::automatic);
  setenv("DEEPWELL_IO", "uring", 1);
  EXPECT_EQ(backend_from_env(), io_backend::uring);
  setenv("DEEPWELL_IO", "threads", 1);
  EXPECT_EQ(backend_from_env(), io_backend::threads);
  setenv("DEEPWELL_IO", "auto", 1);
  EXPECT_EQ(backend_from_env(), io_backend::automatic);
  setenv("DEEPWELL_IO", "bogus", 1);
  try {
    backend_from_env();
    FAIL() << "no error for DEEPWELL_IO=bogus";
  } catch (const error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bogus"), std::string::npos) << m;
    EXPECT_NE(m.find("uring"), std::string::npos) << m;
    EXPECT_NE(m.find("threads"), std::string::npos) << m;
    EXPECT_NE(m.find("auto"), std::string::npos) << m;
  }
}

TEST(io_backend_choice, AutomaticPicksIoUringWhenAvailable) {
  auto io = make_io_engine(io_backend::automatic, 8);
  EXPECT_STREQ(io->name(), io_uring_available() ? "io_uring" : "threads");
  EXPECT_EQ(io_uring_available(), io_uring_available());  // cached, stable
  if (!io_uring_available()) EXPECT_THROW(make_io_engine(io_backend::uring, 8), error);
}

}  // namespace
}  // namespace deepwell::test
