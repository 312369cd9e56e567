// The route chosen at run time (issue 48): a device's profile (given,
// measured once and cached, or the defaults with the reason), the cost
// model's choice between page reads and a whole extent's bulk read, the
// bulk reader's bytes, and the taxi queries' answers equal to a plain scan
// on every route, with the routes and why reported.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <mutex>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/bulk_read.hpp"
#include "deepwell/targets/device_profile.hpp"
#include "deepwell/targets/read_route.hpp"
#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace deepwell::table;
using deepwell::test::expect_error;
using deepwell::test::scratch_file;

namespace {

// A scratch folder for the profiles' cache, removed with its files.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    std::string t = deepwell::test::scratch_dir() + "/deepwell-test-profiles-XXXXXX";
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~scratch_dir() { (void)!std::system(("rm -rf '" + path + "'").c_str()); }
};

// Drops a file's pages from the page cache (clean pages of a synced file);
// false where the file system keeps them (tmpfs).
bool drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  struct stat st {};
  ::stat(path.c_str(), &st);
  return file_resident_share(path, 0, uint64_t(st.st_size)) < 0.01;
}

struct env_var {
  std::string name;
  env_var(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~env_var() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST(DeviceProfile, GivenTextIsReadAndBadTextRefusedNamingThePart) {
  const device_profile p = parse_device_profile("iops=70000, bandwidth=1.5GiB,depth=32");
  EXPECT_EQ(p.random_iops, 70000);
  EXPECT_EQ(p.seq_bytes_per_s, 1.5 * 1073741824.0);
  EXPECT_EQ(p.depth, 32u);
  EXPECT_EQ(p.source, "given");
  const device_profile back = parse_device_profile(device_profile_text(p));
  EXPECT_EQ(back.random_iops, p.random_iops);
  EXPECT_EQ(back.seq_bytes_per_s, p.seq_bytes_per_s);
  EXPECT_EQ(back.depth, p.depth);
  EXPECT_EQ(back.read_bytes, p.read_bytes);
  expect_error([] { parse_device_profile("iops=fast,bandwidth=1GiB"); }, "iops 'fast' is not a positive number");
  expect_error([] { parse_device_profile("iops=-5,bandwidth=1GiB"); }, "iops '-5'");
  expect_error([] { parse_device_profile("iops=5,bandwidth=0"); }, "bandwidth '0'");
  expect_error([] { parse_device_profile("iops=5"); }, "needs both iops and bandwidth");
  expect_error([] { parse_device_profile(""); }, "needs both iops and bandwidth");
  expect_error([] { parse_device_profile("iops=5,bandwidth=1G,speed=3"); }, "unknown name 'speed'");
  expect_error([] { parse_device_profile("iops=5 bandwidth=1G"); }, "iops '5 bandwidth=1G'");
  expect_error([] { parse_device_profile("fast"); }, "'fast' is not name=value");
  expect_error([] { parse_device_profile("iops=5,bandwidth=1G,depth=0"); }, "depth '0'");
}

TEST(DeviceProfile, GivenOrEnvironmentWinsAndBadEnvironmentIsRefusedByName) {
  scratch_file f(1 << 20, 1);
  scratch_dir cache;
  device_profile_options o;
  o.cache_dir = cache.path;
  o.given = "iops=1000,bandwidth=1MiB";
  EXPECT_EQ(device_profile_for(f.path(), o).source, "given");
  o.given.clear();
  {
    env_var e("DEEPWELL_DEVICE_PROFILE", "iops=2000,bandwidth=2MiB");
    const device_profile p = device_profile_for(f.path(), o);
    EXPECT_EQ(p.source, "environment");
    EXPECT_EQ(p.random_iops, 2000);
  }
  env_var e("DEEPWELL_DEVICE_PROFILE", "iops=lots");
  expect_error([&] { device_profile_for(f.path(), o); }, "DEEPWELL_DEVICE_PROFILE");
}

TEST(DeviceProfile, AFileTooSmallToProbeGivesTheDefaultsSayingWhy) {
  scratch_file f(1 << 20, 1);
  scratch_dir cache;
  device_profile_options o;
  o.cache_dir = cache.path;
  const device_profile p = device_profile_for(f.path(), o);
  EXPECT_EQ(p.source, "default");
  EXPECT_NE(p.note.find("not measured"), std::string::npos) << p.note;
  EXPECT_GT(p.random_iops, 0);
  EXPECT_GT(p.seq_bytes_per_s, 0);
  const device_profile missing = device_profile_for(f.path() + "-absent", o);
  EXPECT_EQ(missing.source, "default");
  EXPECT_NE(missing.note.find("-absent"), std::string::npos) << missing.note;
}

TEST(DeviceProfile, IsMeasuredOnceThenReadFromTheCacheAndAnUnreadableCacheIsReplaced) {
  scratch_file f(64ull << 20, 2);
  scratch_dir cache;
  device_profile_options o;
  o.cache_dir = cache.path;
  o.probe_seconds = 0.2;
  const device_profile m = device_profile_for(f.path(), o);
  if (m.source == "default") GTEST_SKIP() << "this file system cannot be probed: " << m.note;
  EXPECT_EQ(m.source, "measured") << m.note;
  EXPECT_GT(m.random_iops, 0);
  EXPECT_GT(m.seq_bytes_per_s, 0);
  EXPECT_EQ(m.key, device_key(f.path()));
  const device_profile c = device_profile_for(f.path(), o);
  EXPECT_EQ(c.source, "cached") << c.note;
  EXPECT_EQ(device_profile_text(c), device_profile_text(m));
  std::ofstream(cache.path + "/" + m.key) << "iops=garbage\n";
  const device_profile r = device_profile_for(f.path(), o);
  EXPECT_EQ(r.source, "measured");
  EXPECT_NE(r.note.find("unreadable"), std::string::npos) << r.note;
  EXPECT_EQ(device_profile_for(f.path(), o).source, "cached");
  o.remeasure = true;
  EXPECT_EQ(device_profile_for(f.path(), o).source, "measured");
}

TEST(ReadRoute, TheModelTakesTheCheaperRouteAndSaysWhy) {
  const device_profile p = parse_device_profile("iops=1000,bandwidth=100MiB,depth=64");
  const uint64_t extent = 100ull << 20, all = extent / 4096;
  const route_choice few = choose_route(p, {extent, 10, 4096, 64});
  EXPECT_EQ(few.route, read_route::pages);
  EXPECT_LT(few.pages_seconds, few.bulk_seconds);
  EXPECT_EQ(few.why.rfind("pages:", 0), 0u) << few.why;
  const route_choice every = choose_route(p, {extent, all, 4096, 64});
  EXPECT_EQ(every.route, read_route::bulk);
  EXPECT_LT(every.bulk_seconds, every.pages_seconds);
  EXPECT_EQ(every.why.rfind("bulk:", 0), 0u) << every.why;
  // Fewer reads in flight than the profile was measured with: slower pages.
  const route_choice one = choose_route(p, {extent, 10, 4096, 1});
  EXPECT_GT(one.pages_seconds, few.pages_seconds);
  // Never faster than measured with more in flight.
  EXPECT_EQ(choose_route(p, {extent, 10, 4096, 1024}).pages_seconds, few.pages_seconds);
  // Reading every page never beats reading the extent in order, however fast the random reads.
  const device_profile fast = parse_device_profile("iops=1e12,bandwidth=100MiB");
  EXPECT_EQ(choose_route(fast, {extent, all + 1, 4096, 64}).route, read_route::bulk);
  device_profile bad = p;
  bad.random_iops = 0;
  expect_error([&] { choose_route(bad, {extent, 10, 4096, 64}); }, "positive iops");
  expect_error([&] { choose_route(p, {extent, 10, 0, 64}); }, "page size of 0");
}

TEST(BulkRead, EveryByteOfEveryExtentPassesOnceAndLandsInThePageCache) {
  const uint64_t bytes = 24ull << 20;
  scratch_file f(bytes, 5);
  const std::vector<uint8_t> want = deepwell::test::read_all(f.path());
  const std::vector<file_extent> ex = {{4096, 9ull << 20}, {12ull << 20, (11ull << 20) + 100}, {bytes - 10, 10}};
  std::vector<std::vector<uint8_t>> got(ex.size());
  for (size_t e = 0; e < ex.size(); ++e) got[e].assign(ex[e].bytes, 0);
  std::vector<std::vector<int>> seen(ex.size(), std::vector<int>(16, 0));
  std::mutex m;
  drop_from_page_cache(f.path());
  bulk_read_options o;
  o.request_bytes = 1 << 20;
  o.threads = 3;
  const bulk_read_report r = bulk_read(f.path(), ex, o, [&](size_t e, uint64_t at, const uint8_t* d, uint64_t n) {
    std::lock_guard<std::mutex> g(m);
    ASSERT_EQ(at % o.request_bytes, 0u);
    ++seen[e][at / o.request_bytes];
    std::memcpy(got[e].data() + at, d, n);
  });
  uint64_t total = 0, requests = 0;
  for (size_t e = 0; e < ex.size(); ++e) {
    total += ex[e].bytes;
    requests += (ex[e].bytes + o.request_bytes - 1) / o.request_bytes;
    EXPECT_TRUE(std::equal(got[e].begin(), got[e].end(), want.begin() + ptrdiff_t(ex[e].offset))) << "extent " << e;
    for (uint64_t k = 0; k < (ex[e].bytes + o.request_bytes - 1) / o.request_bytes; ++k) EXPECT_EQ(seen[e][k], 1);
  }
  EXPECT_EQ(r.bytes, total);
  EXPECT_EQ(r.requests, requests);
  EXPECT_EQ(r.threads, 3u);
  // In the page cache (a loaded machine's kernel may reclaim a page or two
  // before this look).
  EXPECT_GE(file_resident_share(f.path(), ex[1].offset, ex[1].bytes), 0.99);
}

TEST(BulkRead, ASampledResidencyLookSeesHalfAFileInThePageCache) {
  const uint64_t bytes = 32ull << 20;
  scratch_file f(bytes, 6);
  if (!drop_from_page_cache(f.path())) GTEST_SKIP() << "this file system keeps the file in the page cache";
  EXPECT_EQ(file_resident_share(f.path(), 0, bytes, 512), 0.0);
  // Half of it in (readahead may bring more than a read asks for: the
  // second half is dropped again after the read of the whole).
  bulk_read(f.path(), {{0, bytes}});
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  ::posix_fadvise(fd, off_t(bytes / 2), off_t(bytes / 2), POSIX_FADV_DONTNEED);
  ::close(fd);
  const double all = file_resident_share(f.path(), 0, bytes), sampled = file_resident_share(f.path(), 0, bytes, 512);
  EXPECT_NEAR(all, 0.5, 0.01);
  EXPECT_NEAR(sampled, all, 0.1);
  EXPECT_GE(file_resident_share(f.path(), 0, bytes / 2, 512), 0.9);  // one sample in 16 may have been reclaimed
  EXPECT_EQ(file_resident_share(f.path(), bytes / 2, bytes / 2, 512), 0.0);
  EXPECT_EQ(file_resident_share(f.path() + "-absent", 0, bytes, 512), 0.0);
}

TEST(BulkRead, BadExtentsFilesAndVisitorsAreReportedByName) {
  scratch_file f(1 << 20, 5);
  expect_error([&] { bulk_read(f.path(), {{4096, 1 << 20}}); }, "past the end of " + f.path());
  expect_error([&] { bulk_read(f.path() + "-absent", {{0, 10}}); }, f.path() + "-absent");
  expect_error([&] { bulk_read(f.path(), {{0, 1 << 20}}, {0, 2}); }, "request size of 0");
  expect_error(
      [&] {
        bulk_read(f.path(), {{0, 1 << 20}}, {1 << 16, 4}, [](size_t, uint64_t at, const uint8_t*, uint64_t) {
          if (at == 5 << 16) throw error("the visitor refused");
        });
      },
      "the visitor refused");
}

TEST(TaxiRoutes, EveryRouteGivesThePlainScansAnswersAndSaysWhy) {
  scratch_file f("taxi.dwcol");
  const uint64_t rows = 2000000 / deepwell::test::scale_div;
  generate_taxi(f.path(), {rows, 11, 0, 1 << 18});
  const column_file cf = column_file::open(f.path());
  // The pages of the scan column that hold a long trip (the gathered
  // columns' pages a query touches).
  std::vector<int32_t> dist(rows);
  {
    const column_info& c = cf.column("trip_distance");
    const int fd = ::open(f.path().c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, dist.data(), c.bytes, off_t(c.offset)), ssize_t(c.bytes));
    ::close(fd);
  }
  uint64_t touched = 0;
  for (uint64_t p = 0; p < rows; p += 1024) {
    bool any = false;
    for (uint64_t i = p; i < std::min(rows, p + 1024); ++i) any |= dist[i] >= taxi_long_trip;
    touched += any;
  }
  ASSERT_GT(touched, 0u);
  ASSERT_LT(touched, (rows + 1023) / 1024);
  struct run {
    taxi_route_mode mode;
    const char* profile;
    read_route scan, gathered;
  };
  const run runs[] = {
      {taxi_route_mode::pages, "", read_route::pages, read_route::pages},
      {taxi_route_mode::bulk, "", read_route::bulk, read_route::bulk},
      // Slow random reads: every column whole.
      {taxi_route_mode::automatic, "iops=100,bandwidth=1GiB", read_route::bulk, read_route::bulk},
      // Random reads as fast as the bandwidth allows: the scan column whole,
      // the gathered columns' touched pages alone.
      {taxi_route_mode::automatic, "iops=1e9,bandwidth=1GiB", read_route::bulk, read_route::pages},
  };
  uint32_t bulk_columns = 0, reclaimed_columns = 0;
  for (const run& rn : runs)
    for (int q = 0; q < taxi_queries; ++q) {
      if (!drop_from_page_cache(f.path())) GTEST_SKIP() << "this file system keeps the file in the page cache";
      taxi_query_options o;
      o.query = q;
      o.workers = 4;
      o.cache.cache_bytes = 1 << 20;
      o.cache.page_size = 4096;
      o.route = rn.mode;
      o.profile.given = rn.profile;
      const taxi_query_report r = run_taxi_query_cpu(cf, o);
      const taxi_query_result want = taxi_reference(cf, q);
      const std::string what = std::string("Q") + std::to_string(q) + " route " + taxi_route_mode_name(rn.mode) + " " + rn.profile;
      EXPECT_EQ(r.result.failed, 0u) << what;
      EXPECT_EQ(r.result.selected, want.selected) << what;
      EXPECT_EQ(r.result.distance, want.distance) << what;
      EXPECT_EQ(r.result.net, want.net) << what;
      ASSERT_EQ(r.route.columns.size(), size_t(q + 1)) << what;
      EXPECT_EQ(r.route.profiled, rn.mode == taxi_route_mode::automatic) << what;
      EXPECT_GE(r.seconds, r.route.seconds) << what;
      uint64_t bulk = 0;
      const uint32_t reclaimed_before = reclaimed_columns;
      for (int c = 0; c <= q; ++c) {
        const taxi_column_route& cr = r.route.columns[c];
        EXPECT_EQ(cr.column, taxi_query_columns[c]);
        EXPECT_LT(cr.resident, 0.01) << what;
        EXPECT_EQ(cr.route, c == 0 ? rn.scan : rn.gathered) << what << " " << cr.column << ": " << cr.why;
        EXPECT_EQ(cr.why.rfind(route_name(cr.route), 0), 0u) << cr.why;
        // The cache's own word on the column: read in bulk, it is in the page cache.
        EXPECT_FALSE(cr.cache_route.empty()) << what;
        if (cr.route == read_route::bulk) {
          // Read whole, the column is served by the direct tier, unless the
          // kernel reclaimed some of it before the cache looked (a loaded
          // machine): then its misses are queued to the controller, and
          // that must stay rare. (A checked column's mapping is refused
          // below 99% residency before the cache sees its share.)
          ++bulk_columns;
          if (cr.cache_route.find("the direct tier:") == std::string::npos) {
            ++reclaimed_columns;
            EXPECT_NE(cr.cache_route.find("queued to"), std::string::npos) << what << ": " << cr.cache_route;
          }
          bulk += cr.bytes;
          // Read in bulk: in the page cache (the file was dropped before the
          // query, so a bulk read that did not happen leaves it near 0). Not
          // all of it: on a loaded machine the kernel reclaimed a few pages
          // (1 in 1,000 seen in CI's suite) between the query and this check.
          EXPECT_GE(file_resident_share(f.path(), cf.column(cr.column).offset, cr.bytes), 0.99) << what;
        }
        // The gathered columns' pages counted where the scan went through memory.
        if (c > 0 && rn.mode == taxi_route_mode::automatic) {
          EXPECT_TRUE(cr.pages_known) << what;
          EXPECT_EQ(cr.pages_needed, touched) << what;
        }
      }
      EXPECT_EQ(r.route.bulk_bytes, bulk) << what;
      const uint32_t reclaimed_here = reclaimed_columns - reclaimed_before;
      // Columns read whole are in the page cache: the direct tier serves them
      // (those reclaimed in between said why above).
      if (rn.scan == read_route::bulk && rn.gathered == read_route::bulk)
        EXPECT_EQ(r.direct_columns + reclaimed_here, uint32_t(q + 1)) << what;
      if (rn.mode == taxi_route_mode::pages) EXPECT_EQ(r.direct_columns, 0u) << what;
    }
  // Reclaim between a bulk read and the cache's look is rare (1 column of
  // 48 seen on a loaded CI machine): more means the direct tier is broken.
  EXPECT_LE(reclaimed_columns * 10, bulk_columns) << reclaimed_columns << " of " << bulk_columns
                                                  << " columns read whole were not served by the direct tier";
  // Bulk reads that would not fit in the page cache are not made: past the
  // room given, columns are read page by page, and the route says why.
  {
    if (!drop_from_page_cache(f.path())) GTEST_SKIP() << "this file system keeps the file in the page cache";
    taxi_route_settings s;
    s.mode = taxi_route_mode::bulk;
    s.bulk_room = cf.column("trip_distance").bytes + cf.column("total_amount").bytes;
    const taxi_route_report r = route_taxi_columns(cf, 3, s);
    ASSERT_EQ(r.columns.size(), 4u);
    EXPECT_EQ(r.columns[0].route, read_route::bulk);
    EXPECT_EQ(r.columns[1].route, read_route::bulk);
    for (int c = 2; c <= 3; ++c) {
      EXPECT_EQ(r.columns[c].route, read_route::pages);
      EXPECT_NE(r.columns[c].why.find("would not fit in the page cache"), std::string::npos) << r.columns[c].why;
    }
    EXPECT_EQ(r.bulk_bytes, s.bulk_room);
  }
  // Warm: every column resident, nothing read, no profile needed.
  struct stat st {};
  ASSERT_EQ(::stat(f.path().c_str(), &st), 0);
  bulk_read(f.path(), {{0, uint64_t(st.st_size)}});
  taxi_query_options o;
  o.query = 5;
  o.profile.given = "iops=100,bandwidth=1GiB";
  const taxi_query_report warm = run_taxi_query_cpu(cf, o);
  for (const taxi_column_route& cr : warm.route.columns) EXPECT_EQ(cr.route, read_route::resident) << cr.why;
  EXPECT_FALSE(warm.route.profiled);
  EXPECT_EQ(warm.route.bulk_bytes, 0u);
  // A given profile that does not parse is refused by name before any read.
  o.profile.given = "iops=many";
  expect_error([&] { run_taxi_query_cpu(cf, o); }, "iops 'many'");
}
