// Targets: file (buffered and O_DIRECT, dataset at a byte offset, zeroed
// tail, short transfers, errors that name what was wrong), host memory, and
// the fault-injecting wrapper; each over both I/O backends.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/target.hpp"
#include "io_test_support.hpp"

namespace deepwell::test {
namespace {

using steady = std::chrono::steady_clock;

int64_t read_sync(target& t, io_engine& io, void* buf, uint32_t len, uint64_t offset) {
  completion c;
  t.read(io, buf, len, offset, c.callback());
  EXPECT_TRUE(drive(io, c)) << "read never completed";
  EXPECT_EQ(c.calls, 1u);
  return c.result;
}

int64_t write_sync(target& t, io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua = false) {
  completion c;
  t.write(io, buf, len, offset, fua, c.callback());
  EXPECT_TRUE(drive(io, c)) << "write never completed";
  EXPECT_EQ(c.calls, 1u);
  return c.result;
}

int64_t flush_sync(target& t, io_engine& io) {
  completion c;
  t.flush(io, c.callback());
  EXPECT_TRUE(drive(io, c)) << "flush never completed";
  return c.result;
}

// The message of the deepwell::error that `f` throws ("" if none).
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no deepwell::error thrown";
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Whether the scratch directory's file system takes O_DIRECT at all.
bool direct_io_supported(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

#define SKIP_UNLESS_DIRECT_IO(path)                                                             \
  if (!direct_io_supported(path))                                                               \
  GTEST_SKIP() << "O_DIRECT is not supported in " << scratch_dir()                              \
               << " (set DEEPWELL_TEST_DIR to a directory on a disk file system)"

// ---- file target ----

class file_target_test : public per_backend {};

TEST_P(file_target_test, BufferedDatasetAfterAHeader) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(51000, 0, io_seed).data(), 51000);
  file_options o;
  o.offset = 1000;  // a 1000-byte header comes first
  auto t = open_file_target(f.path(), o);
  auto io = make_engine();
  EXPECT_EQ(t->size(), 50000u);
  EXPECT_FALSE(t->writable());
  EXPECT_EQ(t->io_alignment(), 1u);
  EXPECT_EQ(t->memory_alignment(), 1u);
  EXPECT_EQ(t->host_pointer(), nullptr);
  EXPECT_TRUE(contains(t->describe(), f.path())) << t->describe();
  EXPECT_TRUE(contains(t->describe(), "offset 1000")) << t->describe();

  std::vector<uint8_t> buf(8192);
  for (auto [off, len] : {std::pair<uint64_t, uint32_t>{0, 4096}, {4096, 8192}, {12345, 777}, {49000, 1000}}) {
    EXPECT_EQ(read_sync(*t, *io, buf.data(), len, off), len);
    EXPECT_EQ(check_pattern(buf.data(), len, 1000 + off, io_seed), -1) << "dataset offset " << off;
  }
}

TEST_P(file_target_test, DatasetLengthStopsBeforeTheEndOfTheFile) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(20000, 0, io_seed).data(), 20000);
  file_options o;
  o.offset = 100;
  o.length = 5000;
  auto t = open_file_target(f.path(), o);
  EXPECT_EQ(t->size(), 5000u);
}

// The last block of a dataset whose size is not a multiple of the block:
// the bytes past the end come back as zeros, never as whatever follows the
// dataset in the file.
TEST_P(file_target_test, PartialLastBlockIsZeroFilledInBothModes) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(4096 + 10000 + 8192, 0, io_seed).data(), 4096 + 10000 + 8192);
  auto io = make_engine();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    if (direct && !direct_io_supported(f.path())) continue;
    file_options o;
    o.direct = direct;
    o.offset = 4096;
    o.length = 10000;
    auto t = open_file_target(f.path(), o);
    ASSERT_EQ(t->size(), 10000u);
    aligned_buffer buf(4096);

    std::memset(buf.get(), 0xCC, 4096);
    ASSERT_EQ(read_sync(*t, *io, buf.get(), 4096, 8192), 4096);
    EXPECT_EQ(check_pattern(buf.get(), 1808, 4096 + 8192, io_seed), -1);
    EXPECT_TRUE(std::all_of(buf.get() + 1808, buf.get() + 4096, [](uint8_t b) { return b == 0; }))
        << "bytes past the dataset's end leaked";

    std::memset(buf.get(), 0xCC, 4096);  // wholly past the end: all zeros
    ASSERT_EQ(read_sync(*t, *io, buf.get(), 4096, 12288), 4096);
    EXPECT_TRUE(std::all_of(buf.get(), buf.get() + 4096, [](uint8_t b) { return b == 0; }));
  }
}

// A slice (a section of a file, a store's region): its reads stop at its
// end (zeros after, not the next bytes of the file, in both modes), its
// writes stay inside it, a read-only slice of a writable target refuses
// them, and its mapping is its own range.
TEST_P(file_target_test, ASliceReadsAndWritesItsRangeOnly) {
  scratch_file f;
  const uint64_t bytes = 64 << 10;
  write_file(f.path(), pattern_bytes(bytes, 0, io_seed).data(), bytes);
  auto io = make_engine();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    if (direct && !direct_io_supported(f.path())) continue;
    file_options o;
    o.direct = direct;
    o.writable = true;
    auto file = open_file_target(f.path(), o);
    auto s = make_slice_target(file, 8192, 10000, true);
    ASSERT_EQ(s->size(), 10000u);
    aligned_buffer buf(4096);
    std::memset(buf.get(), 0xCC, 4096);
    ASSERT_EQ(read_sync(*s, *io, buf.get(), 4096, 8192), 4096);
    EXPECT_EQ(check_pattern(buf.get(), 1808, 8192 + 8192, io_seed), -1);
    EXPECT_TRUE(std::all_of(buf.get() + 1808, buf.get() + 4096, [](uint8_t b) { return b == 0; }))
        << "bytes after the slice leaked";
    std::memset(buf.get(), 0x5A, 4096);
    EXPECT_EQ(write_sync(*s, *io, buf.get(), 4096, 0), 4096);
    EXPECT_EQ(write_sync(*s, *io, buf.get(), 4096, 8192), -ENOSPC) << "a write past the slice's end";
    auto ro = make_slice_target(file, 8192, 4096, false);
    EXPECT_FALSE(ro->writable());
    EXPECT_EQ(write_sync(*ro, *io, buf.get(), 4096, 0), -EROFS);
    ASSERT_EQ(read_sync(*file, *io, buf.get(), 4096, 8192), 4096);
    EXPECT_TRUE(std::all_of(buf.get(), buf.get() + 4096, [](uint8_t b) { return b == 0x5A; }));
    if (!direct) {
      auto m = ro->map_readonly();
      ASSERT_TRUE(m);
      EXPECT_EQ(m->bytes, 4096u);
      EXPECT_EQ(m->data[0], 0x5A);
    }
    write_file(f.path(), pattern_bytes(bytes, 0, io_seed).data(), bytes);
  }
  auto file = open_file_target(f.path());
  EXPECT_TRUE(contains(error_message([&] { make_slice_target(file, bytes - 4096, 8192, false); }), "not inside"));
  EXPECT_TRUE(contains(error_message([&] { make_slice_target(file, ~0ull - 10, 100, false); }), "not inside"));
  EXPECT_TRUE(contains(error_message([&] { make_slice_target(file, 0, 0, false); }), "not inside"));
}

// A dataset that runs to an unaligned end of file: O_DIRECT reads the whole
// last block, the kernel stops at the end of the file, the rest is zeros.
TEST_P(file_target_test, DirectReadOfTheUnalignedEndOfAFile) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(10000, 0, io_seed).data(), 10000);
  SKIP_UNLESS_DIRECT_IO(f.path());
  file_options o;
  o.direct = true;
  auto t = open_file_target(f.path(), o);
  auto io = make_engine();
  ASSERT_EQ(t->size(), 10000u);
  aligned_buffer buf(8192);
  std::memset(buf.get(), 0xCC, 8192);
  ASSERT_EQ(read_sync(*t, *io, buf.get(), 8192, 4096), 8192);
  EXPECT_EQ(check_pattern(buf.get(), 10000 - 4096, 4096, io_seed), -1);
  EXPECT_TRUE(std::all_of(buf.get() + 10000 - 4096, buf.get() + 8192, [](uint8_t b) { return b == 0; }));
}

TEST_P(file_target_test, DirectReadsFollowTheReportedAlignment) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(1 << 20, 0, io_seed).data(), 1 << 20);
  SKIP_UNLESS_DIRECT_IO(f.path());
  file_options o;
  o.direct = true;
  o.offset = 65536;
  auto t = open_file_target(f.path(), o);
  auto io = make_engine();
  const uint32_t align = t->io_alignment();
  EXPECT_GE(align, 1u);
  EXPECT_EQ(align & (align - 1), 0u) << "alignment " << align << " is not a power of two";
  EXPECT_EQ(65536 % align, 0u);
  EXPECT_TRUE(contains(t->describe(), "O_DIRECT")) << t->describe();

  aligned_buffer buf(65536);
  for (uint64_t off : {uint64_t(0), uint64_t(4096), uint64_t(1 << 19)}) {
    ASSERT_EQ(read_sync(*t, *io, buf.get(), 65536, off), 65536);
    EXPECT_EQ(check_pattern(buf.get(), 65536, 65536 + off, io_seed), -1) << "offset " << off;
  }
  if (align > 1) {  // misaligned requests fail cleanly instead of reaching the kernel
    EXPECT_EQ(read_sync(*t, *io, buf.get(), 4096, align / 2), -EINVAL);
    EXPECT_EQ(read_sync(*t, *io, buf.get(), align + align / 2, 0), -EINVAL);
  }
  if (t->memory_alignment() > 1) EXPECT_EQ(read_sync(*t, *io, buf.get() + 1, 4096, 0), -EINVAL);
}

TEST_P(file_target_test, WritesFlushAndRereadThroughPosix) {
  auto io = make_engine();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    scratch_file f;
    ::unlink(f.path().c_str());  // created by the target
    if (direct) {
      write_file(f.path(), "", 0);
      if (!direct_io_supported(f.path())) continue;
      ::unlink(f.path().c_str());
    }
    file_options o;
    o.direct = direct;
    o.writable = true;
    o.create = true;
    o.create_size = 65536;
    o.offset = 4096;
    auto t = open_file_target(f.path(), o);
    ASSERT_TRUE(t->writable());
    ASSERT_EQ(t->size(), 65536u);
    struct stat st {};
    ASSERT_EQ(stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 4096 + 65536);

    aligned_buffer data(65536);
    fill_pattern(data.get(), 65536, 4096, io_seed);
    for (uint32_t i = 0; i < 16; ++i)
      ASSERT_EQ(write_sync(*t, *io, data.get() + i * 4096, 4096, i * 4096, /*fua=*/i % 2 == 1), 4096) << "block " << i;
    EXPECT_EQ(flush_sync(*t, *io), 0);

    auto back = read_file(f.path(), 0, 4096 + 65536);
    EXPECT_TRUE(std::all_of(back.begin(), back.begin() + 4096, [](uint8_t b) { return b == 0; })) << "header touched";
    EXPECT_EQ(check_pattern(back.data() + 4096, 65536, 4096, io_seed), -1);

    aligned_buffer again(65536);
    ASSERT_EQ(read_sync(*t, *io, again.get(), 65536, 0), 65536);
    EXPECT_EQ(check_pattern(again.get(), 65536, 4096, io_seed), -1);
  }
}

TEST_P(file_target_test, ReadOnlyTargetRefusesWrites) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(8192, 0, io_seed).data(), 8192);
  auto t = open_file_target(f.path());
  auto io = make_engine();
  std::vector<uint8_t> buf(4096, 1);
  EXPECT_EQ(write_sync(*t, *io, buf.data(), 4096, 0), -EROFS);
  EXPECT_EQ(read_file(f.path(), 0, 8192), pattern_bytes(8192, 0, io_seed));
}

TEST_P(file_target_test, WritesPastTheDatasetAreRefused) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(12288, 0, io_seed).data(), 12288);
  file_options o;
  o.writable = true;
  o.length = 8192;  // 4096 bytes of something else follow the dataset
  auto t = open_file_target(f.path(), o);
  auto io = make_engine();
  std::vector<uint8_t> buf(8192, 1);
  EXPECT_EQ(write_sync(*t, *io, buf.data(), 4096, 8192), -EINVAL);
  EXPECT_EQ(write_sync(*t, *io, buf.data(), 8192, 4096), -EINVAL);
  EXPECT_EQ(write_sync(*t, *io, buf.data(), 1, UINT64_MAX), -EINVAL);
  EXPECT_EQ(read_file(f.path(), 0, 12288), pattern_bytes(12288, 0, io_seed));
}

// The file shrinks behind the target's back: reads that find nothing where
// the dataset should be fail with -EIO instead of returning garbage.
TEST_P(file_target_test, FileTruncatedUnderneathGivesEIO) {
  auto io = make_engine();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    scratch_file f;
    write_file(f.path(), pattern_bytes(16384, 0, io_seed).data(), 16384);
    if (direct && !direct_io_supported(f.path())) continue;
    file_options o;
    o.direct = direct;
    auto t = open_file_target(f.path(), o);
    ASSERT_EQ(truncate(f.path().c_str(), 5000), 0);
    aligned_buffer buf(4096);
    EXPECT_EQ(read_sync(*t, *io, buf.get(), 4096, 4096), -EIO);  // short, then nothing
    EXPECT_EQ(read_sync(*t, *io, buf.get(), 4096, 8192), -EIO);  // nothing at all
    EXPECT_EQ(read_sync(*t, *io, buf.get(), 4096, 0), 4096);
  }
}

// An engine that does each transfer in full but reports at most `cap`
// bytes, as a kernel may: the target must carry on with the rest.
class short_reporting_engine final : public io_engine {
 public:
  short_reporting_engine(io_engine& inner, uint32_t cap) : inner_(inner), cap_(cap) {}
  const char* name() const override { return "short"; }
  void queue(const io_op& op) override {
    io_op o = op;
    if (op.kind == io_op::read || op.kind == io_op::write) o.done = {&on_done, new wrapped{op.done, cap_}};
    inner_.queue(o);
  }
  void submit() override { inner_.submit(); }
  unsigned reap() override { return inner_.reap(); }
  void wait(uint64_t ns) override { inner_.wait(ns); }
  unsigned in_flight() const override { return inner_.in_flight(); }

 private:
  struct wrapped {
    io_callback done;
    uint32_t cap;
  };
  static void on_done(void* ctx, int64_t result) {
    auto* w = static_cast<wrapped*>(ctx);
    io_callback done = w->done;
    int64_t r = result > w->cap ? w->cap : result;
    delete w;
    done(r);
  }
  io_engine& inner_;
  uint32_t cap_;
};

TEST_P(file_target_test, ShortTransfersAreResumed) {
  auto real = make_engine();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    scratch_file f;
    write_file(f.path(), pattern_bytes(65536, 0, io_seed).data(), 65536);
    if (direct && !direct_io_supported(f.path())) continue;
    file_options o;
    o.direct = direct;
    o.writable = true;
    auto t = open_file_target(f.path(), o);
    const uint32_t align = t->io_alignment();
    // Buffered: any remainder goes on. O_DIRECT: an aligned one does, an
    // unaligned one cannot be sent and fails the request.
    short_reporting_engine io(*real, direct ? align : 1000);
    aligned_buffer buf(16384);
    ASSERT_EQ(read_sync(*t, io, buf.get(), 16384, 8192), 16384);
    EXPECT_EQ(check_pattern(buf.get(), 16384, 8192, io_seed), -1);

    fill_pattern(buf.get(), 16384, 40000, io_seed);  // the pattern of another offset
    ASSERT_EQ(write_sync(*t, io, buf.get(), 16384, 8192), 16384);
    EXPECT_EQ(read_file(f.path(), 8192, 16384), pattern_bytes(16384, 40000, io_seed));

    if (direct && align > 1) {
      short_reporting_engine odd(*real, align + 1);
      EXPECT_EQ(read_sync(*t, odd, buf.get(), 4 * align, 0), -EIO);
      EXPECT_EQ(write_sync(*t, odd, buf.get(), 4 * align, 0), -EIO);
    }
  }
}

// Several poller threads, each with its own engine, share one target.
TEST_P(file_target_test, ConcurrentPollersShareOneTarget) {
  constexpr uint64_t bytes = 1 << 20;
  scratch_file f;
  write_file(f.path(), pattern_bytes(bytes, 0, io_seed).data(), bytes);
  file_options o;
  o.offset = 512;
  auto t = open_file_target(f.path(), o);
  std::atomic<unsigned> bad{0};
  std::vector<std::thread> pollers;
  for (unsigned p = 0; p < 3; ++p) {
    pollers.emplace_back([&, p] {
      auto io = make_io_engine(GetParam(), 32);
      std::mt19937_64 rng(p);
      constexpr unsigned n = 500;
      std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(1024));
      std::vector<uint64_t> offsets(n);
      std::vector<completion> done(n);
      for (unsigned i = 0; i < n; ++i) {
        offsets[i] = rng() % (t->size() - 1024);
        t->read(*io, bufs[i].data(), 1024, offsets[i], done[i].callback());
      }
      bool finished = drive(*io, [&] { return std::all_of(done.begin(), done.end(), [](auto& c) { return c.done(); }); });
      for (unsigned i = 0; i < n && finished; ++i)
        if (done[i].result != 1024 || check_pattern(bufs[i].data(), 1024, 512 + offsets[i], io_seed) != -1) ++bad;
      if (!finished) ++bad;
    });
  }
  for (auto& th : pollers) th.join();
  EXPECT_EQ(bad.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(backends, file_target_test, testing::Values(io_backend::uring, io_backend::threads),
                         backend_param_name());

// ---- opening files: errors name the path and the numbers ----

// A file created for direct I/O gets its blocks when it is created (an
// O_DIRECT write into a hole holds ext4's inode lock exclusively until it
// lands, one write at a time); one created for buffered I/O stays sparse.
// Unwritten blocks read as zeros either way.
TEST(file_target_open, AFileCreatedForDirectIoIsAllocatedAndReadsZeros) {
  auto io = make_io_engine(io_backend::threads, 16);
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    scratch_file f;
    write_file(f.path(), "", 0);
    if (direct && !direct_io_supported(f.path())) continue;
    bool can_allocate = false;  // whether this file system allocates on request at all
    if (const int fd = ::open(f.path().c_str(), O_RDWR); fd >= 0) {
      can_allocate = fallocate(fd, 0, 0, 4096) == 0;
      ::close(fd);
    }
    ::unlink(f.path().c_str());
    file_options o;
    o.direct = direct;
    o.writable = true;
    o.create = true;
    o.create_size = 1 << 20;
    auto t = open_file_target(f.path(), o);
    struct stat st {};
    ASSERT_EQ(stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 1 << 20);
    if (direct && can_allocate)
      EXPECT_GE(uint64_t(st.st_blocks) * 512, uint64_t(1) << 20) << "blocks allocated at creation";
    if (!direct) EXPECT_LT(uint64_t(st.st_blocks) * 512, uint64_t(1) << 20) << "sparse";
    aligned_buffer back(65536);
    ASSERT_EQ(read_sync(*t, *io, back.get(), 65536, (1 << 20) - 65536), 65536);
    EXPECT_TRUE(std::all_of(back.get(), back.get() + 65536, [](uint8_t b) { return b == 0; }));
  }
}

TEST(file_target_open, MissingFileNamesPathAndReason) {
  std::string path = scratch_dir() + "/deepwell-no-such-file-here";
  std::string m = error_message([&] { open_file_target(path); });
  EXPECT_TRUE(contains(m, path)) << m;
  EXPECT_TRUE(contains(m, "No such file or directory")) << m;
}

TEST(file_target_open, OffsetPastTheEndNamesBothNumbers) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(1000, 0, io_seed).data(), 1000);
  file_options o;
  o.offset = 5000;
  std::string m = error_message([&] { open_file_target(f.path(), o); });
  EXPECT_TRUE(contains(m, f.path())) << m;
  EXPECT_TRUE(contains(m, "5000")) << m;
  EXPECT_TRUE(contains(m, "1000")) << m;

  o.offset = 100;
  o.length = 2000;
  m = error_message([&] { open_file_target(f.path(), o); });
  EXPECT_TRUE(contains(m, "2000")) << m;
  EXPECT_TRUE(contains(m, "1000")) << m;
}

TEST(file_target_open, UnalignedDirectOffsetNamesBothNumbers) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(8192, 0, io_seed).data(), 8192);
  SKIP_UNLESS_DIRECT_IO(f.path());
  file_options o;
  o.direct = true;
  const uint32_t align = open_file_target(f.path(), o)->io_alignment();
  if (align <= 1) GTEST_SKIP() << "no direct-I/O alignment to violate";
  o.offset = 100 % align != 0 ? 100 : 101;  // one of two neighbours is off the alignment
  std::string m = error_message([&] { open_file_target(f.path(), o); });
  EXPECT_TRUE(contains(m, f.path())) << m;
  EXPECT_TRUE(contains(m, std::to_string(o.offset))) << m;
  EXPECT_TRUE(contains(m, "alignment " + std::to_string(align))) << m;
}

TEST(file_target_open, DirectIoUnsupportedFileSystemIsNamed) {
  // tmpfs refused O_DIRECT before Linux 6.6; where it takes it, there is
  // nothing to check.
  std::string path = "/dev/shm/deepwell-test-" + std::to_string(getpid());
  write_file(path, "x", 1);
  bool supported = direct_io_supported(path);
  std::string m;
  if (!supported) {
    file_options o;
    o.direct = true;
    m = error_message([&] { open_file_target(path, o); });
  }
  ::unlink(path.c_str());
  if (supported) GTEST_SKIP() << "/dev/shm takes O_DIRECT here";
  EXPECT_TRUE(contains(m, "O_DIRECT is not supported")) << m;
  EXPECT_TRUE(contains(m, path)) << m;
}

TEST(file_target_open, CreateNeedsWritable) {
  scratch_file f;
  file_options o;
  o.create = true;
  std::string m = error_message([&] { open_file_target(f.path(), o); });
  EXPECT_TRUE(contains(m, f.path())) << m;
}

TEST(file_target_open, NotAFile) {
  std::string m = error_message([&] { open_file_target(scratch_dir()); });
  EXPECT_TRUE(contains(m, scratch_dir())) << m;
}

// ---- host memory target ----

TEST(host_memory_target, ZeroedPageAlignedReadWrite) {
  auto t = make_host_memory_target(10000);
  auto io = make_io_engine(io_backend::threads, 4);
  ASSERT_NE(t->host_pointer(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->host_pointer()) % 4096, 0u);
  EXPECT_EQ(t->size(), 10000u);
  EXPECT_TRUE(t->writable());
  auto* mem = static_cast<uint8_t*>(t->host_pointer());
  EXPECT_TRUE(std::all_of(mem, mem + 10000, [](uint8_t b) { return b == 0; }));

  // Completes before returning: no engine work.
  auto data = pattern_bytes(5000, 100, io_seed);
  completion w;
  t->write(*io, data.data(), 5000, 100, true, w.callback());
  EXPECT_EQ(w.result, 5000);
  EXPECT_EQ(io->in_flight(), 0u);
  EXPECT_EQ(check_pattern(mem + 100, 5000, 100, io_seed), -1);

  std::vector<uint8_t> buf(4096, 0xCC);
  completion r;
  t->read(*io, buf.data(), 4096, 8192, r.callback());
  EXPECT_EQ(r.result, 4096);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0; }));
  std::memset(mem + 8192, 7, 1808);
  t->read(*io, buf.data(), 4096, 8192, r.callback());
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + 1808, [](uint8_t b) { return b == 7; }));
  EXPECT_TRUE(std::all_of(buf.begin() + 1808, buf.end(), [](uint8_t b) { return b == 0; }));

  completion past, fl;
  t->write(*io, data.data(), 4096, 8192, false, past.callback());
  EXPECT_EQ(past.result, -EINVAL);
  t->flush(*io, fl.callback());
  EXPECT_EQ(fl.result, 0);
}

TEST(host_memory_target, WrapsCallerMemoryReadOnly) {
  auto data = pattern_bytes(8192, 0, io_seed);
  auto t = wrap_host_memory(data.data(), data.size(), false);
  auto io = make_io_engine(io_backend::threads, 4);
  EXPECT_EQ(t->host_pointer(), data.data());
  EXPECT_FALSE(t->writable());
  std::vector<uint8_t> buf(4096);
  completion r, w;
  t->read(*io, buf.data(), 4096, 4096, r.callback());
  EXPECT_EQ(r.result, 4096);
  EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, io_seed), -1);
  t->write(*io, buf.data(), 4096, 0, false, w.callback());
  EXPECT_EQ(w.result, -EROFS);
}

// ---- fault target ----

class fault_target_test : public per_backend {
 protected:
  void SetUp() override {
    per_backend::SetUp();
    if (IsSkipped()) return;
    memory = make_host_memory_target(65536);
    fill_pattern(memory->host_pointer(), 65536, 0, io_seed);
    faults = make_fault_target(memory);
    io = make_engine();
  }
  std::shared_ptr<target> memory;
  std::shared_ptr<fault_target> faults;
  std::unique_ptr<io_engine> io;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
};

TEST_P(fault_target_test, ForwardsWhenNoRuleMatches) {
  EXPECT_EQ(faults->size(), 65536u);
  EXPECT_TRUE(faults->writable());
  EXPECT_EQ(faults->host_pointer(), nullptr);  // no bypassing the faults
  EXPECT_TRUE(contains(faults->describe(), memory->describe())) << faults->describe();
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 4096), 4096);
  EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, io_seed), -1);
  EXPECT_EQ(flush_sync(*faults, *io), 0);
  EXPECT_EQ(faults->fired(), 0u);
}

TEST_P(fault_target_test, FailReadHitsOverlappingRequestsOnly) {
  faults->add_rule({fault_rule::fail_read, 8192, 4096});
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 512, 8192 + 1000), -EIO);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 6000), -EIO);  // overlaps the start
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 4096), 4096);  // ends where the range starts
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 12288), 4096);  // starts where it ends
  EXPECT_EQ(write_sync(*faults, *io, buf.data(), 4096, 8192), 4096);  // writes are not reads
  EXPECT_EQ(faults->fired(), 2u);
}

TEST_P(fault_target_test, FailWriteLeavesTheInnerTargetUntouched) {
  fault_rule r;
  r.kind = fault_rule::fail_write;
  r.error = ENOSPC;
  faults->add_rule(r);
  std::vector<uint8_t> ones(4096, 1);
  EXPECT_EQ(write_sync(*faults, *io, ones.data(), 4096, 0), -ENOSPC);
  EXPECT_EQ(check_pattern(memory->host_pointer(), 65536, 0, io_seed), -1);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), 4096);
  EXPECT_EQ(faults->fired(), 1u);
}

TEST_P(fault_target_test, FailFlushMatchesEveryFlushCountTimes) {
  fault_rule r;
  r.kind = fault_rule::fail_flush;
  r.offset = 60000;  // irrelevant for flushes
  r.length = 1;
  r.count = 2;
  faults->add_rule(r);
  EXPECT_EQ(flush_sync(*faults, *io), -EIO);
  EXPECT_EQ(flush_sync(*faults, *io), -EIO);
  EXPECT_EQ(flush_sync(*faults, *io), 0);
  EXPECT_EQ(faults->fired(), 2u);
}

TEST_P(fault_target_test, ShortTransfersReportTheRealCount) {
  faults->add_rule({fault_rule::short_read, 0, 4096});
  faults->add_rule({fault_rule::short_write, 16384, 4096});
  std::fill(buf.begin(), buf.end(), 0xCC);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), 2048);
  EXPECT_EQ(check_pattern(buf.data(), 2048, 0, io_seed), -1);
  EXPECT_EQ(buf[2048], 0xCC);  // the rest never read

  std::vector<uint8_t> ones(4096, 1);
  EXPECT_EQ(write_sync(*faults, *io, ones.data(), 4096, 16384), 2048);
  auto* mem = static_cast<uint8_t*>(memory->host_pointer());
  EXPECT_TRUE(std::all_of(mem + 16384, mem + 16384 + 2048, [](uint8_t b) { return b == 1; }));
  EXPECT_EQ(check_pattern(mem + 16384 + 2048, 2048, 16384 + 2048, io_seed), -1);
  EXPECT_EQ(faults->fired(), 2u);
}

TEST_P(fault_target_test, CountedRuleGoesInertAndClearRemovesRules) {
  fault_rule r;
  r.kind = fault_rule::fail_read;
  r.count = 2;
  faults->add_rule(r);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), -EIO);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), -EIO);
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), 4096);
  EXPECT_EQ(faults->fired(), 2u);

  faults->add_rule({fault_rule::fail_read});
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), -EIO);
  faults->clear_rules();
  EXPECT_EQ(read_sync(*faults, *io, buf.data(), 4096, 0), 4096);
  EXPECT_EQ(faults->fired(), 3u);
}

TEST_P(fault_target_test, DelayHoldsRequestsBackAtLeastThatLong) {
  fault_rule d;
  d.kind = fault_rule::delay;
  d.offset = 0;
  d.length = 8192;
  d.delay_ns = 30'000'000;
  faults->add_rule(d);

  completion slow, fast;
  auto start = steady::now();
  faults->read(*io, buf.data(), 4096, 4096, slow.callback());
  EXPECT_FALSE(slow.done());  // waits for the timer, unlike host memory itself
  std::vector<uint8_t> other(4096);
  faults->read(*io, other.data(), 4096, 32768, fast.callback());
  EXPECT_EQ(fast.result, 4096);  // outside the range: at once
  ASSERT_TRUE(drive(*io, slow));
  EXPECT_GE(steady::now() - start, 30ms);
  EXPECT_EQ(slow.result, 4096);
  EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, io_seed), -1);

  // Delayed, then the other rules still apply.
  faults->add_rule({fault_rule::fail_write, 0, 4096});
  start = steady::now();
  EXPECT_EQ(write_sync(*faults, *io, buf.data(), 4096, 0), -EIO);
  EXPECT_GE(steady::now() - start, 30ms);
  EXPECT_EQ(faults->fired(), 3u);
}

// Over a file target everything completes asynchronously through the engine.
TEST_P(fault_target_test, WrapsAFileTarget) {
  scratch_file f;
  write_file(f.path(), pattern_bytes(16384, 0, io_seed).data(), 16384);
  auto wrapped = make_fault_target(open_file_target(f.path()));
  fault_rule d;
  d.kind = fault_rule::delay;
  d.delay_ns = 10'000'000;
  wrapped->add_rule(d);
  wrapped->add_rule({fault_rule::short_read, 8192, 4096});
  auto start = steady::now();
  EXPECT_EQ(read_sync(*wrapped, *io, buf.data(), 4096, 4096), 4096);
  EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, io_seed), -1);
  EXPECT_GE(steady::now() - start, 10ms);
  EXPECT_EQ(read_sync(*wrapped, *io, buf.data(), 4096, 8192), 2048);
  EXPECT_EQ(wrapped->fired(), 3u);
}

INSTANTIATE_TEST_SUITE_P(backends, fault_target_test, testing::Values(io_backend::uring, io_backend::threads),
                         backend_param_name());

}  // namespace
}  // namespace deepwell::test
