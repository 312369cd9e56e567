// The column store, the taxi generator and the taxi queries with CPU-thread
// clients (issue 18): layouts read back as written, bad files refused with
// errors that name the file and the column, the generator deterministic
// whatever the thread count, and every query's answer equal to a plain
// scan's and to hand-computed sums, under eviction.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>

#include "deepwell/common/error.hpp"
#include "deepwell/table/column_file.hpp"
#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace deepwell::table;
using deepwell::test::scratch_file;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void patch(const std::string& path, uint64_t off, const void* p, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, p, n, off_t(off)), ssize_t(n));
  ::close(fd);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const deepwell::error& e) {
    return e.what();
  }
  return "(no error)";
}

// A table of hand-made trips whose answers are worked out below.
void write_small_taxi(const std::string& path, const std::vector<int32_t>& distance, const std::vector<int32_t>& total,
                      const std::vector<int32_t>& extra, const std::vector<int32_t>& hail,
                      const std::vector<int32_t>& tolls, const std::vector<int32_t>& mta) {
  const uint64_t n = distance.size();
  column_file_writer w(path, n,
                       {{"trip_distance", column_type::decimal32, 2}, {"total_amount", column_type::decimal32, 2},
                        {"extra", column_type::decimal32, 2}, {"improvement_surcharge", column_type::decimal32, 2},
                        {"tolls_amount", column_type::decimal32, 2}, {"mta_tax", column_type::decimal32, 2}},
                       4);
  w.write(0, 0, n, distance.data());
  w.write(1, 0, n, total.data());
  w.write(2, 0, n, extra.data());
  w.write(3, 0, n, hail.data());
  w.write(4, 0, n, tolls.data());
  w.write(5, 0, n, mta.data());
  w.finish();
}

}  // namespace

TEST(ColumnFile, LayoutAndStatisticsReadBackAsWritten) {
  scratch_file f("t.dwcol");
  const uint64_t rows = 10000;
  std::vector<int16_t> a(rows);
  std::vector<int64_t> b(rows);
  std::vector<double> c(rows);
  for (uint64_t i = 0; i < rows; ++i) {
    a[i] = int16_t(int(i % 1000) - 500);
    b[i] = int64_t(i) * 1000003;
    c[i] = double(i) / 3;
  }
  {
    column_file_writer w(f.path(), rows,
                         {{"a", column_type::int16}, {"b", column_type::timestamp_us}, {"c", column_type::float64}}, 4096);
    // Out of order and in pieces: each write lands at its rows.
    w.write(1, 5000, 5000, b.data() + 5000);
    w.write(0, 0, rows, a.data());
    w.write(1, 0, 5000, b.data());
    w.write(2, 0, rows, c.data());
    w.finish();
  }
  const column_file cf = column_file::open(f.path());
  EXPECT_EQ(cf.rows(), rows);
  ASSERT_EQ(cf.columns().size(), 3u);
  const std::string bytes = read_all(f.path());
  for (const column_info& ci : cf.columns()) {
    EXPECT_EQ(ci.offset % column_align, 0u) << ci.name;
    const void* want = ci.name == "a" ? (const void*)a.data() : ci.name == "b" ? (const void*)b.data() : c.data();
    EXPECT_EQ(std::memcmp(bytes.data() + ci.offset, want, ci.bytes), 0) << ci.name;
  }
  EXPECT_EQ(cf.column("b").type, column_type::timestamp_us);
  const auto sa = cf.stats("a");
  ASSERT_EQ(sa.size(), 3u);  // 4096 + 4096 + 1808 rows
  EXPECT_EQ(sa[0].first, -500);
  EXPECT_EQ(sa[0].second, 499);
  const auto sb = cf.stats("b");
  EXPECT_EQ(sb[1].first, 4096 * 1000003ll);
  EXPECT_EQ(sb[2].second, int64_t(rows - 1) * 1000003);
  EXPECT_FALSE(cf.column("c").has_stats);  // floats keep none
}

TEST(ColumnFile, BadFilesAreRefusedWithTheFileAndColumnNamed) {
  scratch_file f("bad.dwcol");
  std::vector<int32_t> d(100, 1);
  write_small_taxi(f.path(), d, d, d, d, d, d);
  ASSERT_NO_THROW(column_file::open(f.path()));
  const std::string good = read_all(f.path());

  // A missing column, a type mismatch.
  const column_file cf = column_file::open(f.path());
  std::string e = error_of([&] { cf.column("fare"); });
  EXPECT_NE(e.find(f.path()), std::string::npos) << e;
  EXPECT_NE(e.find("no column 'fare'"), std::string::npos) << e;
  EXPECT_NE(e.find("trip_distance"), std::string::npos) << e;  // lists what there is
  e = error_of([&] { cf.column("extra", column_type::int64); });
  EXPECT_NE(e.find("'extra' is decimal32, the query needs int64"), std::string::npos) << e;

  // Truncated: the header's size no longer matches.
  ASSERT_EQ(truncate(f.path().c_str(), off_t(good.size() - 4096)), 0);
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find(f.path()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  // Not a column file at all.
  { std::ofstream(f.path(), std::ios::binary | std::ios::trunc) << std::string(8192, 'x'); }
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("not a column file"), std::string::npos) << e;

  // A descriptor whose section runs past the end, and one whose size is wrong for its rows.
  auto rewrite = [&] { std::ofstream(f.path(), std::ios::binary | std::ios::trunc) << good; };
  rewrite();
  const uint64_t desc1 = sizeof(column_file_header) + sizeof(column_desc);  // total_amount
  uint64_t far = good.size();
  patch(f.path(), desc1 + offsetof(column_desc, offset), &far, 8);
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("column 'total_amount'"), std::string::npos) << e;
  rewrite();
  uint64_t wrong = 404;
  patch(f.path(), desc1 + offsetof(column_desc, bytes), &wrong, 8);
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("column 'total_amount': section of 404 bytes"), std::string::npos) << e;
  rewrite();
  uint8_t bad_type = 99;
  patch(f.path(), desc1 + offsetof(column_desc, type), &bad_type, 1);
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("unknown type code 99"), std::string::npos) << e;

  // The version word damaged from 2 to 1 (two bits): not taken for an
  // unchecked file, whose checksum fields are zeros.
  rewrite();
  const uint32_t one = column_file_version_unchecked;
  patch(f.path(), offsetof(column_file_header, version), &one, 4);
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("says version 1 (no checksums) but holds version 2's checksum fields"), std::string::npos) << e;

  // A missing file.
  e = error_of([&] { column_file::open(f.path() + ".absent"); });
  EXPECT_NE(e.find(".absent"), std::string::npos) << e;

  // A row count whose sections wrap 64 bits: 2^62 + 25 rows of 4 bytes
  // "need" 100 bytes modulo 2^64, which a check that wraps would take for
  // the 100 rows' 400 once the sections also say 100 bytes.
  rewrite();
  const uint64_t wrapping_rows = (uint64_t(1) << 62) + 25;
  patch(f.path(), offsetof(column_file_header, rows), &wrapping_rows, 8);
  for (uint64_t i = 0; i < 6; ++i) {
    const uint64_t hundred = 100;
    patch(f.path(), sizeof(column_file_header) + i * sizeof(column_desc) + offsetof(column_desc, bytes), &hundred, 8);
  }
  e = error_of([&] { column_file::open(f.path()); });
  EXPECT_NE(e.find("column 'trip_distance': section of 100 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("more than 2^64"), std::string::npos) << e;
}

TEST(ColumnFile, AWriterRefusesRowsWhoseBytesOverflow) {
  scratch_file f("huge.dwcol");
  // What `--rows -5` became before the command line checked it: 2^64 - 5.
  const std::string e = error_of([&] {
    column_file_writer w(f.path(), ~uint64_t(0) - 4, {{"a", column_type::int8, 0}, {"b", column_type::int64, 0}}, 0);
  });
  EXPECT_NE(e.find(f.path()), std::string::npos) << e;
  EXPECT_NE(e.find("more than 2^64 bytes"), std::string::npos) << e;
  // Statistics alone can overflow too: one row group a row.
  const std::string e2 = error_of([&] {
    column_file_writer w(f.path(), uint64_t(1) << 60, {{"a", column_type::int8, 0}}, 1);
  });
  EXPECT_NE(e2.find("more than 2^64 bytes"), std::string::npos) << e2;
}

TEST(TaxiTable, GeneratorIsDeterministicWhateverTheThreadsAndLooksLikeTheTlcData) {
  scratch_file a("a.dwcol"), b("b.dwcol");
  const uint64_t rows = 1000000 / deepwell::test::scale_div;
  generate_taxi(a.path(), {rows, 7, 1, 1 << 16});
  generate_taxi(b.path(), {rows, 7, 3, 1 << 16});
  EXPECT_TRUE(read_all(a.path()) == read_all(b.path()));
  const column_file f = column_file::open(a.path());
  EXPECT_EQ(f.columns().size(), taxi_schema().size());
  EXPECT_EQ(f.column("tpep_pickup_datetime").type, column_type::timestamp_us);
  // Long trips near BaM's 0.03% (Poisson: 4 standard deviations).
  const taxi_query_result q0 = taxi_reference(f, 0);
  const double expect = rows * taxi_long_trip_share;
  EXPECT_NEAR(double(q0.selected), expect, 4 * std::sqrt(expect) + 1);
  // Rows add up: total is the sum of its parts; drop-off after pick-up.
  for (uint64_t r = 0; r < rows; r += 9973) {
    const taxi_row t = taxi_row_at(7, r);
    EXPECT_EQ(t.total_amount, t.fare_amount + t.extra + t.mta_tax + t.tip_amount + t.tolls_amount +
                                  t.improvement_surcharge + t.congestion_surcharge + t.airport_fee);
    EXPECT_GT(t.dropoff_us, t.pickup_us);
  }
  // Another seed, another table.
  EXPECT_NE(taxi_row_at(8, 5).pickup_us, taxi_row_at(7, 5).pickup_us);
}

TEST(TaxiQueries, HandMadeTripsGiveTheWorkedOutAnswers) {
  scratch_file f("hand.dwcol");
  // Trips 0 and 2 are >= 30.00 miles; 1 is just short; 3 is far but zero-fare.
  write_small_taxi(f.path(), {3000, 2999, 5000, 12000, 10}, {10000, 99999, 20000, 0, 5},
                   {100, 7, 50, 0, 1}, {30, 30, 30, 0, 1}, {655, 0, 0, 0, 1}, {50, 50, 50, 0, 1});
  const column_file cf = column_file::open(f.path());
  const long long want_net[6] = {0, 30000, 29850, 29790, 29135, 29035};
  for (int q = 0; q < taxi_queries; ++q) {
    taxi_query_options o;
    o.query = q;
    o.workers = 2;
    const taxi_query_report r = run_taxi_query_cpu(cf, o);
    EXPECT_EQ(r.result.failed, 0u);
    EXPECT_EQ(r.result.selected, 3u) << "Q" << q;
    EXPECT_EQ(r.result.distance, 20000) << "Q" << q;
    EXPECT_EQ(r.result.net, want_net[q]) << "Q" << q;
    // The setup's parts: making the cache is timed within the whole.
    EXPECT_GT(r.setup_cache_seconds, 0.0);
    EXPECT_LE(r.setup_cache_seconds, r.setup_seconds);
    const taxi_query_result ref = taxi_reference(cf, q);
    EXPECT_EQ(ref.net, want_net[q]) << "Q" << q;
  }
  EXPECT_NEAR(taxi_dollars_per_mile({3, 20000, 29035, 0}), 1.45175, 1e-9);
}

TEST(TaxiQueries, CpuClientsEqualAPlainScanUnderEviction) {
  scratch_file f("taxi.dwcol");
  const uint64_t rows = 2000000 / deepwell::test::scale_div;
  generate_taxi(f.path(), {rows, 3, 0, 1 << 18});
  const column_file cf = column_file::open(f.path());
  // Modes: the direct tier with the selected values read alone (the file
  // was just written: in the page cache), the direct tier bringing their
  // pages in, every miss through the controller.
  for (int mode = 0; mode < 3; ++mode)
  for (int q = 0; q < taxi_queries; ++q) {
    taxi_query_options o;
    o.query = q;
    o.workers = 4;
    o.cache.cache_bytes = 1 << 20;  // 256 pages for up to 6 columns of 8 MB: every page evicted
    o.cache.page_size = 4096;
    o.direct_tier = mode < 2;
    o.sparse_gather = mode == 0;
    const taxi_query_report r = run_taxi_query_cpu(cf, o);
    const taxi_query_result want = taxi_reference(cf, q);
    EXPECT_EQ(r.result.failed, 0u) << "Q" << q << " mode " << mode;
    if (mode == 2) EXPECT_EQ(r.direct_columns, 0u);
    // Values read alone: the selected rows of each further direct column.
    if (mode == 0 && r.direct_columns == uint32_t(q + 1)) EXPECT_EQ(r.sparse_reads, want.selected * uint64_t(q));
    if (mode != 0) EXPECT_EQ(r.sparse_reads, 0u);
    EXPECT_EQ(r.result.selected, want.selected) << "Q" << q;
    EXPECT_EQ(r.result.distance, want.distance) << "Q" << q;
    EXPECT_EQ(r.result.net, want.net) << "Q" << q;
    EXPECT_GT(want.selected, 0u);
    // The scan column is read in full; the others only where a long trip lies.
    EXPECT_GE(r.bytes_read, rows * 4) << "Q" << q;
    // Q0 reads its one column about once (whole pages); Q1-Q5 less than whole columns.
    if (q == 0) EXPECT_LE(r.bytes_read, r.bytes_tiling * 101 / 100);
    else EXPECT_LT(r.bytes_read, r.bytes_tiling) << "Q" << q;
  }
}

TEST(TaxiQueries, AQueryOfAnAbsentOrMistypedColumnNamesIt) {
  scratch_file f("cols.dwcol");
  {
    std::vector<int32_t> d(64, 3000);
    std::vector<int64_t> t(64, 1);
    column_file_writer w(f.path(), 64, {{"trip_distance", column_type::decimal32, 2}, {"total_amount", column_type::int64}});
    w.write(0, 0, 64, d.data());
    w.write(1, 0, 64, t.data());
    w.finish();
  }
  const column_file cf = column_file::open(f.path());
  taxi_query_options o;
  o.query = 0;
  EXPECT_EQ(run_taxi_query_cpu(cf, o).result.selected, 64u);
  o.query = 1;
  std::string e = error_of([&] { run_taxi_query_cpu(cf, o); });
  EXPECT_NE(e.find("'total_amount' is int64, the query needs decimal32"), std::string::npos) << e;
  o.query = 2;
  e = error_of([&] { run_taxi_query_cpu(cf, o); });
  EXPECT_NE(e.find("'total_amount' is int64"), std::string::npos) << e;
  o.query = 7;
  e = error_of([&] { run_taxi_query_cpu(cf, o); });
  EXPECT_NE(e.find("Q7 does not exist"), std::string::npos) << e;
}
