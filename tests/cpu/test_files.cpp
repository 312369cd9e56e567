// The file API (files/gfs_ref.hpp, files/file_system.hpp) with CPU clients:
// every call, byte-for-byte reads and writes under eviction and
// concurrency (threads and emulated warps), close-to-open consistency with
// the host, directory walks, and each kind of bad input answered with its
// errno, never a hang or a read outside the file.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "files_test_support.hpp"
#include "cache_test_support.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
namespace fs = std::filesystem;

namespace {

// A directory tree of its own, removed at the end.
struct tree {
  fs::path root;
  tree() {
    std::string t = test::scratch_dir() + "/deepwell-files-XXXXXX";
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    root = t;
  }
  ~tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void put(const std::string& rel, const std::vector<uint8_t>& bytes) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  std::vector<uint8_t> get(const std::string& rel) const {
    std::ifstream in(root / rel, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }
};

std::vector<uint8_t> pattern(uint64_t n, uint64_t seed) { return test::pattern_bytes(n, 0, seed); }

// A minute's deadline: ThreadSanitizer on a loaded two-core CI machine is
// slow, and a slow wait must not read as a failure (a hang still fails).
cache_config slow_ok(cache_config c) {
  c.timeout_ns = 60ull * 1000000000ull;
  return c;
}

// A controller, a small host cache (evictions) and the file system over `t`.
struct rig {
  controller ctl;
  std::shared_ptr<page_cache> cache;
  std::shared_ptr<file_system> files;
  explicit rig(const tree& t, uint64_t pages = 64, file_system_options o = {})
      : ctl(controller_config{}), cache(make_host_page_cache(ctl, slow_ok(test::small_cache(pages)))) {
    o.root = t.root.string();
    files = make_host_file_system(cache, o);
  }
  const gfs_ref& ref() const { return files->ref(); }
};

using test::read_all;

}  // namespace

TEST(Files, OpenReadCloseGivesTheFileByteForByte) {
  tree t;
  for (uint64_t n : {0ull, 1ull, 4095ull, 4096ull, 100000ull}) t.put("f" + std::to_string(n), pattern(n, n));
  rig r(t, 8);  // 8 pages: the larger files evict
  const gfs_ref& g = r.ref();
  for (uint64_t n : {0ull, 1ull, 4095ull, 4096ull, 100000ull}) {
    const gfile f = g.gopen(("f" + std::to_string(n)).c_str(), g_rdonly);
    ASSERT_TRUE(f.ok()) << f.err;
    gstat st;
    ASSERT_EQ(g.gfstat(one_lane{}, f, &st), 0);
    EXPECT_EQ(st.size, n);
    EXPECT_TRUE(S_ISREG(st.mode));
    EXPECT_EQ(read_all(g, f), pattern(n, n)) << n;
    // A read straddling the end comes back short; past the end, 0.
    std::vector<uint8_t> buf(64, 0xEE);
    if (n >= 10) EXPECT_EQ(g.gread(f, n - 10, buf.data(), 64), 10);
    EXPECT_EQ(g.gread(f, n, buf.data(), 64), 0);
    EXPECT_EQ(g.gread(f, n + 5000, buf.data(), 64), 0);
    EXPECT_EQ(g.gclose(f), 0);
  }
  const file_system_stats st = r.files->stats();
  EXPECT_EQ(st.open_files, 0u);
  EXPECT_EQ(st.requests, 10u) << "an open and a close a file";
  EXPECT_GT(st.service_ns, 0u) << "the service's time answering them is counted";
  EXPECT_LE(st.lock_wait_ns, st.service_ns);
}

TEST(Files, DirectIoReadsGiveTheFileByteForByteAndWritersStayBuffered) {
  tree t;
  const std::vector<uint64_t> sizes = {0, 1, 4095, 4096, 3 * 4096 + 100, 100000};
  for (uint64_t n : sizes) t.put("f" + std::to_string(n), pattern(n, n + 7));
  file_system_options o;
  o.direct_io = true;
  rig r(t, 8, o);
  const gfs_ref& g = r.ref();
  for (uint64_t n : sizes) {
    const gfile f = g.gopen(("f" + std::to_string(n)).c_str(), g_rdonly);
    ASSERT_TRUE(f.ok()) << f.err;
    EXPECT_EQ(read_all(g, f, 5000), pattern(n, n + 7)) << n;
    std::vector<uint8_t> buf(64, 0xEE);
    if (n >= 10) EXPECT_EQ(g.gread(f, n - 10, buf.data(), 64), 10);
    EXPECT_EQ(g.gclose(f), 0);
  }
  // Opened for writing: buffered, and the write reaches the file.
  const gfile w = g.gopen("f4096", g_rdwr);
  ASSERT_TRUE(w.ok()) << w.err;
  const std::vector<uint8_t> x(100, 0x42);
  EXPECT_EQ(g.gwrite(w, 10, x.data(), x.size()), 100);
  EXPECT_EQ(g.gclose(w), 0);
  std::vector<uint8_t> want = pattern(4096, 4096 + 7);
  std::fill(want.begin() + 10, want.begin() + 110, 0x42);
  EXPECT_EQ(t.get("f4096"), want);
  const file_system_stats s = r.files->stats();
  EXPECT_LE(s.direct_opens, sizes.size()) << "only read-only opens use O_DIRECT";
  RecordProperty("direct_opens", std::to_string(s.direct_opens));  // 0 where the file system has no O_DIRECT
}

TEST(Files, WritesReachTheFileWithItsExactSizeOnClose) {
  tree t;
  rig r(t, 8);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("out/new.bin", g_rdwr | g_creat);
  EXPECT_EQ(f.err, ENOENT);  // the directory does not exist: nothing is created on the way
  fs::create_directories(t.root / "out");
  const gfile w = g.gopen("out/new.bin", g_rdwr | g_creat);
  ASSERT_TRUE(w.ok()) << w.err;
  std::vector<uint8_t> want;
  std::mt19937_64 rng(3);
  // Unaligned pieces, some overlapping, some leaving holes (read as zeros).
  for (int i = 0; i < 40; ++i) {
    const uint64_t off = rng() % 50000, n = 1 + rng() % 7000;
    const auto piece = pattern(n, 100 + i);
    ASSERT_EQ(g.gwrite(w, off, piece.data(), n), int64_t(n));
    if (want.size() < off + n) want.resize(off + n, 0);
    std::copy(piece.begin(), piece.end(), want.begin() + off);
  }
  EXPECT_EQ(read_all(g, w, 5000), want);  // read back before close
  EXPECT_EQ(g.gclose(w), 0);
  EXPECT_EQ(t.get("out/new.bin"), want);  // size exact, not rounded to a page
}

namespace {

// `threads` threads write `want` to f in pieces, thread k taking pieces k,
// k + threads, ...; returns the writes that failed.
int write_interleaved(const gfs_ref& g, const gfile& f, const std::vector<uint8_t>& want, uint64_t piece,
                      unsigned threads) {
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  for (uint64_t k = 0; k < threads; ++k)
    ts.emplace_back([&, k] {
      for (uint64_t off = k * piece; off < want.size(); off += threads * piece) {
        const uint64_t n = std::min<uint64_t>(piece, want.size() - off);
        if (g.gwrite(f, off, want.data() + off, n) != int64_t(n)) ++failed;
      }
    });
  for (auto& t : ts) t.join();
  return failed.load();
}

}  // namespace

// Write-behind: a gwrite to a write-once file starts the write-back of
// every page it covers whole (those pages are final), so they reach the
// host while the program goes on, with no eviction (a cache far larger
// than the file, no cleaner) and no close. Pages written in parts wait for
// the close. Three threads write interleaved 9,000-byte pieces.
TEST(Files, WriteOnceWholePagesReachTheHostBeforeTheClose) {
  tree t;
  controller ctl(controller_config{});
  cache_config cc = slow_ok(test::small_cache(1024));
  cc.clean_threshold = 0;
  auto cache = make_host_page_cache(ctl, cc);
  file_system_options o;
  o.root = t.root.string();
  auto files = make_host_file_system(cache, o);
  const gfs_ref& g = files->ref();
  const uint64_t size = 300007, piece = 9000, page = cc.page_size;
  const std::vector<uint8_t> want = pattern(size, 41);
  const gfile f = g.gopen("out.bin", g_wronly | g_gwronce);
  ASSERT_TRUE(f.ok()) << f.err;
  ASSERT_EQ(write_interleaved(g, f, want, piece, 3), 0);
  EXPECT_EQ(cache->stats().evictions, 0u);
  // The pages some piece covered whole, as the host must come to hold them.
  std::vector<uint64_t> whole;
  for (uint64_t off = 0; off < size; off += piece) {
    const uint64_t end = std::min(off + piece, size);
    for (uint64_t p = (off + page - 1) / page; (p + 1) * page <= end; ++p) whole.push_back(p);
  }
  ASSERT_GT(whole.size(), 30u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t landed = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<uint8_t> now = t.get("out.bin");
    landed = 0;
    for (uint64_t p : whole)
      if (now.size() >= (p + 1) * page && std::equal(want.begin() + p * page, want.begin() + (p + 1) * page, now.begin() + p * page))
        ++landed;
    if (landed == whole.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(landed, whole.size()) << "whole pages of a write-once file are written back without a close";
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(t.get("out.bin"), want);
  EXPECT_EQ(cache->stats().bytes_read, 0u) << "no page of a write-once file is read";
}

// GPUfs's O_GWRONCE: an output file whose pages are never read. Four
// threads write interleaved 100-byte pieces (every page gets pieces of
// all four) through an 8-page cache, so pages are written back, evicted
// and written again: the host merges each write-back into the file.
TEST(Files, WriteOnceFilesAreNeverReadAndKeepEveryPiece) {
  tree t;
  t.put("out.bin", pattern(300000, 9));  // emptied at open
  rig r(t, 8);
  const gfs_ref& g = r.ref();
  const uint64_t size = 200003, piece = 100;
  std::vector<uint8_t> want = pattern(size, 77);
  for (size_t i = 0; i < want.size(); i += 7) want[i] = 0;  // zeros written are bytes written too
  const uint64_t read_before = r.cache->stats().bytes_read;
  const gfile f = g.gopen("out.bin", g_wronly | g_gwronce);
  ASSERT_TRUE(f.ok()) << f.err;
  EXPECT_EQ(g.gopen("out.bin", g_rdonly).err, EBUSY) << "a write-once file is its writer's alone";
  EXPECT_EQ(write_interleaved(g, f, want, piece, 4), 0);
  EXPECT_EQ(r.cache->stats().bytes_read, read_before) << "no page of a write-once file is read";
  EXPECT_GT(r.cache->stats().writebacks, 8u) << "pages were written back before the close (evictions)";
  std::vector<uint8_t> buf(10);
  EXPECT_EQ(g.gread(f, 0, buf.data(), 10), -EBADF) << "write-only";
  EXPECT_EQ(g.gmmap(one_lane{}, f, 0).err, EACCES);
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(t.get("out.bin"), want);
  // Reopened, it reads as the file: its window (cached pages with zeros
  // where the file has bytes) is not reused.
  const gfile again = g.gopen("out.bin", g_rdonly);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(read_all(g, again, 7000), want);
  EXPECT_EQ(g.gclose(again), 0);
  EXPECT_EQ(r.files->stats().windows_reused, 0u);
  // Write-once comes with write-only, and needs the file to itself.
  EXPECT_EQ(g.gopen("x", g_rdwr | g_gwronce).err, EINVAL);
  EXPECT_EQ(g.gopen("x", g_rdonly | g_gwronce).err, EINVAL);
  const gfile reader = g.gopen("out.bin", g_rdonly);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(g.gopen("out.bin", g_wronly | g_gwronce).err, EBUSY);
  EXPECT_EQ(g.gclose(reader), 0);
  EXPECT_EQ(r.files->stats().open_files, 0u);
}

// gclose_async does not wait for the file's writes: the storage here is
// held to 256 KiB/s (server mode's rate cap on the embedded client), so
// writing back 96 dirty pages takes over a second. gclose waits that long;
// gclose_async returns once the writes are submitted, and sync() waits for
// the host to finish the close.
TEST(Files, AnAsyncCloseReturnsBeforeTheWritesLandAndSyncWaitsForThem) {
  tree t;
  controller_config cc;
  cc.io_budget_bytes = 1 << 20;
  controller ctl(cc);
  ctl.set_client_share(0, {1, 256 * 1024});
  auto cache = make_host_page_cache(ctl, slow_ok(test::small_cache(256)));
  auto files = make_host_file_system(cache, {.root = t.root.string()});
  const gfs_ref& g = files->ref();
  const uint64_t n = 96 * 4096 - 100;  // a partial last page
  auto write_file = [&](const char* name, uint64_t seed) {
    const gfile f = g.gopen(name, g_wronly | g_creat);
    EXPECT_TRUE(f.ok()) << f.err;
    const auto data = pattern(n, seed);
    EXPECT_EQ(g.gwrite(f, 0, data.data(), n), int64_t(n));
    return f;
  };
  auto seconds = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // The rate's first burst (64 KiB) goes at once; the rest takes 1.25 s.
  const gfile a = write_file("a", 1);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(g.gclose_async(a), 0);
  const double async_s = seconds(t0);
  EXPECT_EQ(files->stats().closes_pending, 1u) << "the close waits for its writes on the host";
  // Closed once is closed: a second close finds no user left to close.
  EXPECT_EQ(g.gclose(a), -EBADF);
  EXPECT_EQ(g.gclose_async(a), -EBADF);
  files->sync();
  const double landed_s = seconds(t0);
  EXPECT_EQ(t.get("a"), pattern(n, 1)) << "size exact, bytes equal";
  const uint8_t late = 7;
  EXPECT_EQ(g.gwrite(a, 0, &late, 1), -EBADF) << "the host clears the tag of an entry its closer thread frees";
  EXPECT_EQ(files->stats().closes_pending, 0u);
  EXPECT_EQ(files->stats().background_closes, 1u);
  EXPECT_EQ(files->stats().open_files, 0u);
  const gfile b = write_file("b", 2);
  t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(g.gclose(b), 0);
  const double sync_close_s = seconds(t0);
  EXPECT_EQ(t.get("b"), pattern(n, 2));
  RecordProperty("seconds", std::to_string(async_s) + " async, " + std::to_string(landed_s) + " landed, " +
                                std::to_string(sync_close_s) + " gclose");
  EXPECT_GT(sync_close_s, 0.8) << "the rate cap did not slow the writes: the test shows nothing";
  EXPECT_LT(async_s, sync_close_s / 4) << async_s << " s against " << sync_close_s << " s for gclose";
  EXPECT_GT(landed_s, 0.8);
}

// Threads write files of their own under eviction, close them with
// gclose_async, and reopen some at once: this program sees its writes
// (the same cache); after sync() the host sees every file.
TEST(Files, AsyncClosesUnderEvictionReachTheFiles) {
  tree t;
  rig r(t, 16);
  const gfs_ref& g = r.ref();
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 5; ++i) {
        const std::string name = std::to_string(k) + "-" + std::to_string(i);
        const auto data = pattern(20000 + 3001 * i + k, 10 * k + i);
        const gfile w = g.gopen(name.c_str(), g_rdwr | g_creat);
        if (!w.ok()) {
          ++failed;
          continue;
        }
        for (uint64_t off = 0; off < data.size(); off += 3333)
          if (g.gwrite(w, off, data.data() + off, std::min<uint64_t>(3333, data.size() - off)) < 0) ++failed;
        if (g.gclose_async(w) != 0) ++failed;
        if (i % 2) {
          const gfile again = g.gopen(name.c_str(), g_rdonly);
          if (!again.ok() || read_all(g, again, 4000) != data) ++failed;
          if (g.gclose(again) != 0) ++failed;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  r.files->sync();
  for (int k = 0; k < 6; ++k)
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(t.get(std::to_string(k) + "-" + std::to_string(i)), pattern(20000 + 3001 * i + k, 10 * k + i));
  const file_system_stats s = r.files->stats();
  EXPECT_EQ(s.background_closes, 30u);
  EXPECT_EQ(s.background_close_errors, 0u);
  EXPECT_EQ(s.open_files, 0u);
}

// A write-back that fails (the file may not grow past RLIMIT_FSIZE) is
// reported by sync(), naming the file, once.
TEST(Files, AFailedAsyncCloseIsReportedBySync) {
  tree t;
  rig r(t, 64);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("big", g_wronly | g_creat);
  ASSERT_TRUE(f.ok());
  const auto data = pattern(100000, 5);
  ASSERT_EQ(g.gwrite(f, 0, data.data(), data.size()), int64_t(data.size()));
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 16384;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_EQ(g.gclose_async(f), 0) << "taken; it fails on the host";
  try {
    r.files->sync();
    ADD_FAILURE() << "sync did not report the failed close";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("big"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(r.files->stats().background_close_errors, 1u);
  EXPECT_EQ(r.files->stats().open_files, 0u);
  EXPECT_NO_THROW(r.files->sync()) << "reported once";
}

TEST(Files, ThreadsReadAndWriteManyFilesUnderEviction) {
  tree t;
  constexpr int nfiles = 24;
  for (int i = 0; i < nfiles; ++i) t.put("in/" + std::to_string(i), pattern(20000 + 997 * i, i));
  fs::create_directories(t.root / "out");
  rig r(t, 16);
  const gfs_ref& g = r.ref();
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k)
    threads.emplace_back([&, k] {
      std::mt19937_64 rng(k);
      for (int round = 0; round < 12; ++round) {
        // Readers share files with each other (several opens of one file).
        const int i = int(rng() % nfiles);
        const gfile f = g.gopen(("in/" + std::to_string(i)).c_str(), g_rdonly);
        if (!f.ok()) {
          ++failed;
          continue;
        }
        const uint64_t size = 20000 + 997 * i;
        for (int a = 0; a < 8; ++a) {
          const uint64_t off = rng() % size, n = 1 + rng() % 9000;
          std::vector<uint8_t> buf(n);
          const int64_t got = g.gread(f, off, buf.data(), n);
          const uint64_t expect = std::min(n, size - off);
          if (got != int64_t(expect)) {
            ++failed;
            continue;
          }
          const auto ref = test::pattern_bytes(expect, off, i);
          if (!std::equal(ref.begin(), ref.end(), buf.begin())) ++wrong;
        }
        if (g.gclose(f) != 0) ++failed;
      }
      // Each thread writes a file of its own in pieces and closes it.
      const gfile w = g.gopen(("out/" + std::to_string(k)).c_str(), g_wronly | g_creat);
      if (!w.ok()) {
        ++failed;
        return;
      }
      const auto data = pattern(30000 + k, 50 + k);
      for (uint64_t off = 0; off < data.size(); off += 1234)
        if (g.gwrite(w, off, data.data() + off, std::min<uint64_t>(1234, data.size() - off)) < 0) ++failed;
      if (g.gclose(w) != 0) ++failed;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(t.get("out/" + std::to_string(k)), pattern(30000 + k, 50 + k)) << k;
  EXPECT_EQ(r.files->stats().open_files, 0u);
}

TEST(Files, WarpCollectiveCallsOnEmulatedWarps) {
  tree t;
  t.put("a", pattern(50000, 1));
  fs::create_directories(t.root / "o");
  rig r(t, 3 * 32);  // every lane of 3 warps may pin a page at once (page_cache::check_capacity)
  const gfs_ref& g = r.ref();
  std::atomic<int> bad{0}, last_err{0}, step{0};
  auto fail = [&](int s, int64_t e) {
    ++bad;
    step = s;
    last_err = int(e);
  };
  std::vector<std::thread> warps;
  for (uint32_t id = 0; id < 3; ++id)
    warps.emplace_back([&, id] {
      const unsigned mask = id == 1 ? 0x0000FF0Fu : 0xFFFFFFFFu;
      std::vector<uint8_t> buf(50000);  // one buffer for the warp: every lane passes the same arguments
      const auto data = pattern(9000, 7 + id);
      test::run_warp(mask, id, [&](test::emulated_warp w) {
        // One open per warp, every lane with the same arguments.
        const gfile f = g.gopen(w, "a", g_rdonly);
        if (!f.ok()) return fail(1, f.err);
        if (int64_t n = g.gread(w, f, 0, buf.data(), buf.size()); n != 50000) fail(2, n);
        w.sync(w.active());
        if (w.lane() == lowest_lane(w.active()) && buf != pattern(50000, 1)) fail(3, 0);
        if (int e = g.gclose(w, f)) fail(4, e);
        const std::string name = "o/" + std::to_string(id);
        const gfile o = g.gopen(w, name.c_str(), g_rdwr | g_creat);
        if (!o.ok()) return fail(5, o.err);
        if (int64_t n = g.gwrite(w, o, 100, data.data(), data.size()); n != 9000) fail(6, n);
        if (int e = g.gfsync(w, o)) fail(7, e);
        if (int e = g.gclose(w, o)) fail(8, e);
      });
    });
  for (auto& th : warps) th.join();
  EXPECT_EQ(bad.load(), 0) << "step " << step << ", result " << last_err;
  for (uint32_t id = 0; id < 3; ++id) {
    std::vector<uint8_t> want(100, 0);
    const auto data = pattern(9000, 7 + id);
    want.insert(want.end(), data.begin(), data.end());
    EXPECT_EQ(t.get("o/" + std::to_string(id)), want);
  }
}

// The new calls on emulated warps (one with a partial mask): each warp
// writes a file of its own whole-warp and closes it with gclose_async (the
// warp's lanes submit its pages' write-backs together), and all three
// write interleaved pieces of one write-once file, through a cache small
// enough to evict.
TEST(Files, AsyncClosesAndWriteOnceFilesOnEmulatedWarps) {
  tree t;
  rig r(t, 3 * 32);
  const gfs_ref& g = r.ref();
  const uint64_t shared_size = 300000, piece = 700;
  std::vector<uint8_t> shared = pattern(shared_size, 99);
  const gfile once = g.gopen("once", g_wronly | g_gwronce);
  ASSERT_TRUE(once.ok()) << once.err;
  std::atomic<int> bad{0}, last_err{0}, step{0};
  auto fail = [&](int s, int64_t e) {
    ++bad;
    step = s;
    last_err = int(e);
  };
  std::vector<std::thread> warps;
  for (uint32_t id = 0; id < 3; ++id)
    warps.emplace_back([&, id] {
      const unsigned mask = id == 1 ? 0x00F0FF0Fu : 0xFFFFFFFFu;
      const auto data = pattern(60000 + 999 * id, 20 + id);
      test::run_warp(mask, id, [&](test::emulated_warp w) {
        for (uint64_t off = id * piece; off < shared_size; off += 3 * piece) {
          const uint64_t n = std::min(piece, shared_size - off);
          if (int64_t got = g.gwrite(w, once, off, shared.data() + off, n); got != int64_t(n)) fail(1, got);
        }
        const std::string name = "w" + std::to_string(id);
        const gfile o = g.gopen(w, name.c_str(), g_rdwr | g_creat);
        if (!o.ok()) return fail(2, o.err);
        for (uint64_t off = 0; off < data.size(); off += 5000) {
          const uint64_t n = std::min<uint64_t>(5000, data.size() - off);
          if (int64_t got = g.gwrite(w, o, off, data.data() + off, n); got != int64_t(n)) fail(3, got);
        }
        if (int e = g.gclose_async(w, o)) fail(4, e);
      });
    });
  for (auto& th : warps) th.join();
  EXPECT_EQ(bad.load(), 0) << "step " << step << ", result " << last_err;
  EXPECT_EQ(g.gclose_async(once), 0);
  r.files->sync();
  for (uint32_t id = 0; id < 3; ++id)
    EXPECT_EQ(t.get("w" + std::to_string(id)), pattern(60000 + 999 * id, 20 + id)) << id;
  EXPECT_EQ(t.get("once"), shared);
  const file_system_stats st = r.files->stats();
  EXPECT_EQ(st.background_closes, 4u);
  EXPECT_EQ(st.open_files, 0u);
}

TEST(Files, CloseToOpenWithTheHost) {
  tree t;
  t.put("x", pattern(10000, 1));
  rig r(t, 32);
  const gfs_ref& g = r.ref();
  gfile f = g.gopen("x", g_rdonly);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(read_all(g, f), pattern(10000, 1));
  ASSERT_EQ(g.gclose(f), 0);
  // Unchanged: the reopen keeps its window (and cached pages).
  f = g.gopen("x", g_rdonly);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(r.files->stats().windows_reused, 1u);
  EXPECT_EQ(read_all(g, f), pattern(10000, 1));
  ASSERT_EQ(g.gclose(f), 0);
  // The host rewrites it (same size): the next open sees the host's bytes.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t.put("x", pattern(10000, 2));
  f = g.gopen("x", g_rdonly);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(read_all(g, f), pattern(10000, 2));
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(r.files->stats().windows_reused, 1u);
  // And the GPU's writes are the host's once gclose returns.
  f = g.gopen("x", g_rdwr);
  ASSERT_TRUE(f.ok());
  const auto piece = pattern(500, 3);
  ASSERT_EQ(g.gwrite(f, 9800, piece.data(), 500), 500);
  ASSERT_EQ(g.gclose(f), 0);
  auto want = pattern(10000, 2);
  want.resize(10300);
  std::copy(piece.begin(), piece.end(), want.begin() + 9800);
  EXPECT_EQ(t.get("x"), want);
}

TEST(Files, TruncateShrinksAndGrowsWithZeros) {
  tree t;
  t.put("t", pattern(20000, 4));
  rig r(t, 32);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("t", g_rdwr);
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> buf(20000);
  ASSERT_EQ(g.gread(f, 0, buf.data(), buf.size()), 20000);  // all of it cached
  ASSERT_EQ(g.gftruncate(one_lane{}, f, 5000), 0);
  EXPECT_EQ(fs::file_size(t.root / "t"), 5000u);
  ASSERT_EQ(g.gftruncate(one_lane{}, f, 12000), 0);
  auto want = pattern(5000, 4);
  want.resize(12000, 0);
  EXPECT_EQ(read_all(g, f), want);  // the cached tail was zeroed, not resurrected
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(t.get("t"), want);
  const gfile ro = g.gopen("t", g_rdonly);
  EXPECT_EQ(g.gftruncate(one_lane{}, ro, 0), -EINVAL);
  EXPECT_EQ(g.gclose(ro), 0);
}

TEST(Files, FsyncMakesTheWritesTheFilesWithoutAClose) {
  tree t;
  rig r(t, 32);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("s", g_rdwr | g_creat);
  ASSERT_TRUE(f.ok());
  const auto data = pattern(7777, 9);
  ASSERT_EQ(g.gwrite(f, 0, data.data(), data.size()), 7777);
  const uint64_t flushes = r.cache->stats().flushes;
  ASSERT_EQ(g.gfsync(one_lane{}, f), 0);
  EXPECT_EQ(r.cache->stats().flushes, flushes + 1) << "gfsync flushes the namespace (an fsync)";
  EXPECT_EQ(t.get("s"), data);  // on disk, with its exact size, while still open
  // gclose writes back and sets the size, but is not durable (POSIX's close
  // is not): no flush. The host sees the writes all the same.
  const auto more = pattern(9000, 10);
  ASSERT_EQ(g.gwrite(f, 7777, more.data(), more.size()), 9000);
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(r.cache->stats().flushes, flushes + 1) << "gclose makes no flush";
  std::vector<uint8_t> both = data;
  both.insert(both.end(), more.begin(), more.end());
  EXPECT_EQ(t.get("s"), both);
}

TEST(Files, MappedPagesReadAndWriteTheFile) {
  tree t;
  t.put("m", pattern(10000, 5));
  rig r(t, 32);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("m", g_rdwr);
  ASSERT_TRUE(f.ok());
  gmapping m = g.gmmap(one_lane{}, f, 9000);
  ASSERT_TRUE(m.ok()) << m.err;
  EXPECT_EQ(m.offset, 8192u);
  EXPECT_EQ(m.length, 10000u - 8192u);
  const auto want = pattern(10000, 5);
  EXPECT_TRUE(std::equal(want.begin() + 8192, want.end(), m.data()));
  m.write(10, 0xAB);
  ASSERT_EQ(g.gmsync(one_lane{}, m), 0);
  g.gmunmap(m);
  EXPECT_EQ(t.get("m")[8202], 0xAB);
  EXPECT_EQ(g.gmmap(one_lane{}, f, 10000).err, EINVAL);  // past the end
  ASSERT_EQ(g.gclose(f), 0);
}

TEST(Files, AKernelCanWalkADirectoryTree) {
  tree t;
  std::set<std::string> want;
  for (int i = 0; i < 30; ++i) {
    const std::string p = "d" + std::to_string(i % 4) + (i % 3 ? "/sub" + std::to_string(i % 2) : "") + "/f" +
                          std::to_string(i);
    t.put(p, pattern(10 + i, i));
    want.insert(p);
  }
  rig r(t, 32);
  const gfs_ref& g = r.ref();
  std::set<std::string> seen;
  std::function<void(const std::string&)> walk = [&](const std::string& dir) {
    const gdir d = g.gopendir(one_lane{}, dir.c_str());
    ASSERT_TRUE(d.ok()) << dir << ": " << d.err;
    gdirent e;
    for (int n; (n = g.greaddir(one_lane{}, d, &e)) == 1;) {
      const std::string p = dir.empty() ? e.name : dir + "/" + e.name;
      if (e.type == 4) walk(p);
      if (e.type == 8) {
        seen.insert(p);
        const gfile f = g.gopen(p.c_str(), g_rdonly);  // and each file reads back whole
        ASSERT_TRUE(f.ok());
        const int i = std::stoi(p.substr(p.rfind('f') + 1));
        EXPECT_EQ(read_all(g, f), pattern(10 + i, i));
        EXPECT_EQ(g.gclose(f), 0);
      }
    }
    EXPECT_EQ(g.gclosedir(one_lane{}, d), 0);
  };
  walk("");
  EXPECT_EQ(seen, want);
  EXPECT_EQ(r.files->stats().open_dirs, 0u);
}

// ---- bad input: an errno for the calling threads, never a hang or a read outside the file ----

TEST(Files, PathsOutsideTheRootAreRefused) {
  tree t;
  t.put("in/ok", pattern(100, 1));
  fs::path outside = t.root.parent_path() / (t.root.filename().string() + "-outside");
  std::ofstream(outside) << "secret";
  fs::create_symlink(outside, t.root / "escape");
  fs::create_symlink("in/ok", t.root / "inside");
  fs::create_symlink("../../" + t.root.filename().string() + "-outside", t.root / "in/up");
  rig r(t);
  const gfs_ref& g = r.ref();
  for (const char* p : {"../x", "in/../../x", "/etc/passwd", "escape", "in/up"})
    EXPECT_EQ(g.gopen(p, g_rdonly).err, EACCES) << p;
  EXPECT_EQ(g.gopendir(one_lane{}, "..").err, EACCES);
  const gfile in = g.gopen("inside", g_rdonly);  // a symlink that stays inside is followed
  EXPECT_TRUE(in.ok()) << in.err;
  EXPECT_EQ(g.gclose(in), 0);
  fs::remove(outside);
}

TEST(Files, MissingFilesDirectoriesLongNamesAndBadFlags) {
  tree t;
  t.put("dir/f", pattern(10, 1));
  ASSERT_EQ(mkfifo((t.root / "fifo").c_str(), 0600), 0);
  rig r(t);
  const gfs_ref& g = r.ref();
  EXPECT_EQ(g.gopen("nope", g_rdonly).err, ENOENT);
  EXPECT_EQ(g.gopen("", g_rdonly).err, ENOENT);
  EXPECT_EQ(g.gopen(nullptr, g_rdonly).err, ENOENT);
  EXPECT_EQ(g.gopen("dir", g_rdonly).err, EISDIR);
  EXPECT_EQ(g.gopen("dir", g_rdwr).err, EISDIR);
  EXPECT_EQ(g.gopen("fifo", g_rdonly).err, EINVAL);  // not a regular file, and no hang
  EXPECT_EQ(g.gopendir(one_lane{}, "dir/f").err, ENOTDIR);
  const std::string long_name(5000, 'a');
  EXPECT_EQ(g.gopen(long_name.c_str(), g_rdonly).err, ENAMETOOLONG);
  const std::string long_part(300, 'b');
  EXPECT_EQ(g.gopen(long_part.c_str(), g_rdonly).err, ENAMETOOLONG);  // the kernel's NAME_MAX
  EXPECT_EQ(g.gopen("dir/f", g_rdonly | g_trunc).err, EINVAL);
  EXPECT_EQ(g.gopen("dir/f", 0x800000).err, EINVAL);
  EXPECT_EQ(g.gopen("dir/f", 3).err, EINVAL);
  EXPECT_EQ(r.files->stats().open_files, 0u);
}

TEST(Files, PrefetchedPagesAreReadFromTheCacheAndBadHandlesAreRefused) {
  tree t;
  t.put("p", pattern(40000, 7));  // 10 pages
  rig r(t, 64);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("p", g_rdonly);
  ASSERT_TRUE(f.ok());
  const uint64_t misses0 = r.cache->stats().misses;
  ASSERT_EQ(g.gprefetch(f, 0, 1 << 20), 0);  // clipped to the file
  EXPECT_EQ(r.cache->stats().misses - misses0, 10u) << "a fetch started for each of the file's pages";
  EXPECT_EQ(g.gprefetch(f, 50000, 10), 0) << "past the end: nothing to do";
  EXPECT_EQ(read_all(g, f), pattern(40000, 7));
  EXPECT_EQ(r.cache->stats().misses - misses0, 10u) << "the reads found every page fetched already";
  EXPECT_EQ(g.gprefetch(gfile{}, 0, 100), -EBADF);
  const gfile w = g.gopen("out", g_wronly | g_creat);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(g.gprefetch(w, 0, 100), -EBADF) << "write-only";
  EXPECT_EQ(g.gclose(w), 0);
  EXPECT_EQ(g.gclose(f), 0);
  EXPECT_EQ(g.gprefetch(f, 0, 100), -EBADF) << "closed";
}

TEST(Files, HandlesThatAreNotOpenAndWritesToReadOnlyHandles) {
  tree t;
  t.put("a", pattern(5000, 1));
  t.put("b", pattern(5000, 2));
  file_system_options one;
  one.max_open = 1;  // b must take a's entry (entries are reused oldest first)
  rig r(t, 64, one);
  const gfs_ref& g = r.ref();
  std::vector<uint8_t> buf(100);
  EXPECT_EQ(g.gread(gfile{}, 0, buf.data(), 100), -EBADF);
  gfile forged;
  forged.err = 0;
  forged.fd = 100000;
  EXPECT_EQ(g.gread(forged, 0, buf.data(), 100), -EBADF);
  const gfile a = g.gopen("a", g_rdonly);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(g.gwrite(a, 0, buf.data(), 100), -EBADF);
  ASSERT_EQ(g.gclose(a), 0);
  // A closed handle stays dead, even once its table entry serves another file.
  EXPECT_EQ(g.gread(a, 0, buf.data(), 100), -EBADF);
  const gfile b = g.gopen("b", g_rdonly);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.fd, a.fd);
  EXPECT_EQ(g.gread(a, 0, buf.data(), 100), -EBADF);
  EXPECT_EQ(g.gclose(a), -EBADF);
  EXPECT_EQ(g.gread(b, 0, buf.data(), 100), 100);
  EXPECT_EQ(g.gclose(b), 0);
  // The same file again, in the same entry and the same (kept) window: the
  // entry's generation still tells the old handle from the new one.
  const gfile a2 = g.gopen("a", g_rdonly);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2.fd, a.fd);
  EXPECT_EQ(a2.window, a.window);
  EXPECT_NE(a2.tag, a.tag);
  EXPECT_EQ(g.gread(a, 0, buf.data(), 100), -EBADF);
  EXPECT_EQ(g.gclose(a), -EBADF) << "a stale close does not close the new one";
  EXPECT_EQ(g.gread(a2, 0, buf.data(), 100), 100);
  EXPECT_EQ(g.gclose(a2), 0);
  EXPECT_EQ(r.files->stats().windows_reused, 1u);
}

TEST(Files, MoreOpenFilesThanTheTableHolds) {
  tree t;
  for (int i = 0; i < 6; ++i) t.put(std::to_string(i), pattern(10, i));
  file_system_options o;
  o.max_open = 4;
  o.max_dirs = 1;
  rig r(t, 64, o);
  const gfs_ref& g = r.ref();
  std::vector<gfile> open;
  for (int i = 0; i < 4; ++i) open.push_back(g.gopen(std::to_string(i).c_str(), g_rdonly));
  for (auto& f : open) EXPECT_TRUE(f.ok());
  EXPECT_EQ(g.gopen("4", g_rdonly).err, EMFILE);
  const gfile again = g.gopen("0", g_rdonly);  // an open file opened again takes no entry
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(again.fd, open[0].fd);
  EXPECT_EQ(g.gclose(again), 0);
  EXPECT_EQ(g.gclose(open[3]), 0);
  EXPECT_TRUE(g.gopen("5", g_rdonly).ok());
  const gdir d = g.gopendir(one_lane{}, "");
  EXPECT_TRUE(d.ok());
  EXPECT_EQ(g.gopendir(one_lane{}, "").err, EMFILE);
  EXPECT_EQ(g.gclosedir(one_lane{}, d), 0);
}

// The process's descriptor table holds max_open more descriptors from the
// start (FDSize in /proc/self/status: the table's slots), so opens never
// wait for it to grow; where the descriptor limit is lower it stays.
TEST(Files, TheDescriptorTableIsGrownAtTheStart) {
  auto fd_slots = [] {
    std::ifstream st("/proc/self/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("FDSize:", 0) == 0) return std::stoull(line.substr(7));
    return 0ull;
  };
  const uint64_t before = fd_slots();
  if (before == 0) GTEST_SKIP() << "no FDSize in /proc/self/status";
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  tree t;
  t.put("a", pattern(10, 1));
  file_system_options o;
  o.max_open = uint32_t(before + 1024);  // more than the table holds now
  rig r(t, 8, o);
  const gfile f = r.ref().gopen("a", g_rdonly);  // the file system works either way
  ASSERT_TRUE(f.ok()) << f.err;
  EXPECT_EQ(r.ref().gclose(f), 0);
  if (before + o.max_open + 64 >= lim.rlim_cur) GTEST_SKIP() << "the descriptor limit is below the table asked for";
  EXPECT_GE(fd_slots(), uint64_t(o.max_open)) << "grown once, before any open";
}

TEST(Files, AFileThatShrinksWhileOpenReadsZerosNeverOtherBytes) {
  tree t;
  t.put("s", pattern(40000, 1));
  t.put("other", pattern(40000, 2));
  rig r(t, 4);  // 4 pages: nothing of s stays cached
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("s", g_rdonly);
  const gfile o = g.gopen("other", g_rdonly);
  ASSERT_TRUE(f.ok() && o.ok());
  fs::resize_file(t.root / "s", 1000);  // behind the GPU's back
  std::vector<uint8_t> buf(40000, 0xEE), other(40000);
  ASSERT_EQ(g.gread(o, 0, other.data(), other.size()), 40000);
  EXPECT_EQ(g.gread(f, 0, buf.data(), buf.size()), 40000);  // the size the GPU saw at open
  const auto head = pattern(1000, 1);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), buf.begin()));
  for (uint64_t i = 4096; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0) << i;
  EXPECT_EQ(g.gclose(f), 0);
  EXPECT_EQ(g.gclose(o), 0);
}

TEST(Files, ReadOnlyFileSystemsAndTruncatingAFileOthersHaveOpen) {
  tree t;
  t.put("a", pattern(100, 1));
  {
    file_system_options o;
    o.read_only = true;
    rig r(t, 64, o);
    EXPECT_EQ(r.ref().gopen("a", g_rdwr).err, EROFS);
    EXPECT_EQ(r.ref().gopen("new", g_rdwr | g_creat).err, EROFS);
    EXPECT_FALSE(fs::exists(t.root / "new"));
  }
  rig r(t);
  const gfs_ref& g = r.ref();
  const gfile f = g.gopen("a", g_rdonly);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(g.gopen("a", g_rdwr | g_trunc).err, EBUSY);
  const gfile w = g.gopen("a", g_rdwr);  // a writer joins a reader
  ASSERT_TRUE(w.ok());
  const uint8_t x = 7;
  EXPECT_EQ(g.gwrite(w, 0, &x, 1), 1);
  EXPECT_EQ(g.gclose(w), 0);
  EXPECT_EQ(g.gclose(f), 0);
  EXPECT_EQ(t.get("a")[0], 7);
  if (geteuid() != 0) {  // root passes every permission check
    fs::permissions(t.root / "a", fs::perms::owner_read);
    EXPECT_EQ(g.gopen("a", g_rdwr).err, EACCES);
  }
}

TEST(Files, BadOptionsAreRefusedByName) {
  tree t;
  controller ctl;
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  EXPECT_THROW(
      {
        try {
          make_host_file_system(cache, {});
        } catch (const error& e) {
          EXPECT_NE(std::string(e.what()).find("no root"), std::string::npos) << e.what();
          throw;
        }
      },
      error);
  file_system_options o;
  o.root = (t.root / "missing").string();
  try {
    make_host_file_system(cache, o);
    ADD_FAILURE() << "a missing root was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  o.root = t.root.string();
  o.max_open = 0;
  EXPECT_THROW(make_host_file_system(cache, o), error);
  o.max_open = 16;
  o.reply_poll_ns = 2000000;
  try {
    make_host_file_system(cache, o);
    ADD_FAILURE() << "a 2 ms poll was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("reply_poll_ns"), std::string::npos) << e.what();
  }
}

// The direct tier (file_system_options::files_direct): a large read-only
// file in the page cache is read from its mapping, with no controller
// round trip, byte for byte, by threads at once; a small one is not. The
// mapping outlives the close until sync(); a reopen of the unchanged file
// keeps it; a writer that joins turns it off for the window before its
// open returns, and readers then see its writes through the cache.
TEST(Files, LargeResidentFilesAreReadThroughTheDirectTierUntilAWriterComes) {
  tree t;
  const uint64_t big = 300000 + 123, small = 20000;
  t.put("big", pattern(big, 5));
  t.put("small", pattern(small, 6));  // both just written: in the page cache
  file_system_options o;
  o.files_direct = file_system_options::direct_tier::on;
  o.direct_min_bytes = 64 << 10;
  rig r(t, 8, o);  // 8 pages: the big file evicts itself
  const gfs_ref& g = r.ref();

  const gfile s = g.gopen("small", g_rdonly);
  ASSERT_TRUE(s.ok()) << s.err;
  EXPECT_EQ(read_all(g, s), pattern(small, 6));
  EXPECT_EQ(g.gclose(s), 0);
  EXPECT_EQ(r.files->stats().direct_tier_opens, 0u) << "below direct_min_bytes";
  EXPECT_EQ(r.cache->stats().direct_fills, 0u);

  // Four threads read the big file in random pieces at once (opened here
  // first, so that each of theirs finds the tier made).
  const std::vector<uint8_t> want = pattern(big, 5);
  auto readers = [&](int rounds) {
    const gfile first = g.gopen("big", g_rdonly);
    if (!first.ok()) return -1;
    std::vector<std::thread> th;
    std::atomic<int> bad{0};
    for (int k = 0; k < 4; ++k)
      th.emplace_back([&, k] {
        const gfile f = g.gopen("big", g_rdonly);
        if (!f.ok()) return void(++bad);
        std::mt19937_64 rng(k);
        std::vector<uint8_t> buf(9000);
        for (int i = 0; i < rounds; ++i) {
          const uint64_t off = rng() % (big + 100), n = 1 + rng() % buf.size();
          const int64_t got = g.gread(f, off, buf.data(), n);
          const uint64_t expect = off >= big ? 0 : std::min(n, big - off);
          if (got != int64_t(expect) || !std::equal(buf.begin(), buf.begin() + expect, want.begin() + off)) ++bad;
        }
        if (g.gclose(f) != 0) ++bad;
      });
    for (auto& x : th) x.join();
    return g.gclose(first) == 0 ? bad.load() : -2;
  };
  r.cache->reset_stats();
  EXPECT_EQ(readers(300), 0);
  cache_stats cs = r.cache->stats();
  EXPECT_GT(cs.direct_fills, 0u);
  EXPECT_EQ(cs.direct_fills, cs.misses) << "every miss of the big file from its mapping";
  file_system_stats st = r.files->stats();
  EXPECT_EQ(st.direct_tier_opens, 1u) << "one first open of the big file";
  EXPECT_EQ(st.direct_tier_bytes, big) << "kept after the last close, until sync()";
  EXPECT_EQ(readers(50), 0) << "reopened unchanged: the window and its mapping kept";
  EXPECT_EQ(r.files->stats().direct_tier_bytes, big);
  r.files->sync();
  EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u);

  // A reader, then a writer joins: later misses go through the controller
  // and see the writer's bytes.
  const gfile rd = g.gopen("big", g_rdonly);
  ASSERT_TRUE(rd.ok()) << rd.err;
  EXPECT_EQ(read_all(g, rd, 5000), want);
  const gfile wr = g.gopen("big", g_rdwr);
  ASSERT_TRUE(wr.ok()) << wr.err;
  const std::vector<uint8_t> x(50000, 0x5A);
  EXPECT_EQ(g.gwrite(wr, 100000, x.data(), x.size()), int64_t(x.size()));
  EXPECT_EQ(g.gclose(wr), 0);  // written back and durable
  std::vector<uint8_t> now = want;
  std::fill(now.begin() + 100000, now.begin() + 150000, 0x5A);
  r.cache->reset_stats();
  EXPECT_EQ(read_all(g, rd, 5000), now);
  EXPECT_EQ(r.cache->stats().direct_fills, 0u) << "no reads from the mapping once a writer came";
  EXPECT_EQ(g.gclose(rd), 0);
  EXPECT_EQ(t.get("big"), now);
  r.files->sync();
  EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u);
}

TEST(Files, TheDirectTierKeepsToItsBudgetAndIsOffForCpuClientsByDefault) {
  tree t;
  const uint64_t big = 200000;
  t.put("big", pattern(big, 8));
  for (int mode = 0; mode < 2; ++mode) {
    file_system_options o;
    o.direct_min_bytes = 4096;
    if (mode == 0) {
      o.files_direct = file_system_options::direct_tier::on;
      o.direct_max_bytes = big - 1;  // the file does not fit
    }  // mode 1: automatic, which is off for CPU clients
    rig r(t, 8, o);
    const gfs_ref& g = r.ref();
    const gfile f = g.gopen("big", g_rdonly);
    ASSERT_TRUE(f.ok()) << f.err;
    EXPECT_EQ(read_all(g, f), pattern(big, 8)) << mode;
    EXPECT_EQ(g.gclose(f), 0);
    EXPECT_EQ(r.files->stats().direct_tier_opens, 0u) << mode;
    EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u) << mode;
    EXPECT_EQ(r.cache->stats().direct_fills, 0u) << mode;
  }
}
