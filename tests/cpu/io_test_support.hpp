// Helpers for the io_engine and target tests: the pattern seed of their
// files (scratch files and the pattern are tests/common's), whole-file
// reads and writes, completion records, and a loop that drives an engine
// until callbacks arrive (with a deadline, so a lost completion fails a test
// instead of hanging it).
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"
#include "deepwell/targets/io_engine.hpp"

namespace deepwell {
// So that test names read "GetParam() = threads", not raw bytes (found by ADL).
inline void PrintTo(io_backend b, std::ostream* os) {
  *os << (b == io_backend::uring ? "uring" : b == io_backend::threads ? "threads" : "automatic");
}
}  // namespace deepwell

namespace deepwell::test {

// The seed of the pattern these suites write and check. Not 0: under seed 0
// the word at offset 0 is zero, and reads from offset 0 that come back as
// zeros must not pass for the data.
constexpr uint64_t io_seed = 1;

// Writes `bytes` at offset 0 of `path` (replacing the file's contents).
inline void write_file(const std::string& path, const void* bytes, size_t len) {
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, bytes, len, 0), static_cast<ssize_t>(len));
  ::close(fd);
}

inline std::vector<uint8_t> read_file(const std::string& path, uint64_t offset, size_t len) {
  std::vector<uint8_t> v(len);
  int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::pread(fd, v.data(), len, static_cast<off_t>(offset)), static_cast<ssize_t>(len));
  ::close(fd);
  return v;
}

// Memory aligned for O_DIRECT.
struct aligned_buffer {
  explicit aligned_buffer(size_t len, size_t align = 4096) : size(len) {
    void* p = nullptr;
    if (posix_memalign(&p, align, len ? len : 1) != 0) throw std::bad_alloc();
    data.reset(static_cast<uint8_t*>(p));
    std::memset(p, 0, len);
  }
  struct freer {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, freer> data;
  size_t size;
  uint8_t* get() const { return data.get(); }
};

// One awaited completion.
// A read or a write of `len` bytes at `offset` (its callback unset).
inline io_op io_transfer(io_op::kind_t kind, int fd, const void* buf, uint32_t len, uint64_t offset) {
  io_op op;
  op.kind = kind;
  op.fd = fd;
  op.buf = const_cast<void*>(buf);
  op.len = len;
  op.offset = offset;
  return op;
}

struct completion {
  static constexpr int64_t not_yet = INT64_MIN;
  int64_t result = not_yet;
  unsigned calls = 0;
  bool done() const { return calls > 0; }
  io_callback callback() { return {&on_done, this}; }
  static void on_done(void* ctx, int64_t r) {
    auto* c = static_cast<completion*>(ctx);
    c->result = r;
    ++c->calls;
  }
};

using namespace std::chrono_literals;

// Submits, reaps and waits until `finished()` or the deadline; returns
// whether `finished()` became true.
inline bool drive(io_engine& io, const std::function<bool()>& finished,
                  std::chrono::milliseconds deadline = 10000ms) {
  auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    io.submit();
    io.reap();
    if (finished()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    io.wait(1000000);  // 1 ms
  }
}

inline bool drive(io_engine& io, completion& c, std::chrono::milliseconds deadline = 10000ms) {
  return drive(io, [&] { return c.done(); }, deadline);
}

inline const char* backend_name(io_backend b) {
  switch (b) {
    case io_backend::uring:
      return "uring";
    case io_backend::threads:
      return "threads";
    default:
      return "automatic";
  }
}

// Tests run once per backend; the io_uring run is skipped where io_uring
// is unavailable (seccomp, io_uring_disabled).
class per_backend : public testing::TestWithParam<io_backend> {
 protected:
  void SetUp() override {
    if (GetParam() == io_backend::uring && !io_uring_available())
      GTEST_SKIP() << "io_uring is not available in this process";
  }
  std::unique_ptr<io_engine> make_engine(unsigned depth = 64) const { return make_io_engine(GetParam(), depth); }
};

struct backend_param_name {
  std::string operator()(const testing::TestParamInfo<io_backend>& info) const {
    return backend_name(info.param);
  }
};

}  // namespace deepwell::test
