// The taxi queries with GPU warps as clients (issue 18): every answer of Q0
// to Q5 equals a plain scan's, through a cache far smaller than the
// columns (pages evicted while the selected rows' other columns are
// fetched), through the direct tier (selected values read alone, or their
// pages brought in) and the controller from the page cache, and with
// O_DIRECT; the scan column is read
// once, the others only where a long trip lies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "../common/scratch_file.hpp"

using namespace deepwell;
using namespace deepwell::table;

TEST(GpuTable, TaxiQueriesEqualAPlainScanUnderEviction) {
  deepwell::test::scratch_file f("taxi.dwcol");
  const uint64_t rows = 24ull << 20;  // 96 MiB a column
  generate_taxi(f.path(), {rows, 11, 0, 1 << 20});
  const column_file cf = column_file::open(f.path());
  // Modes: the direct tier (the file was just written: in the page cache)
  // with the selected values read alone from host memory, the direct tier
  // bringing their pages in, the controller from the page cache, the
  // controller with O_DIRECT.
  for (int mode = 0; mode < 4; ++mode)
    for (int q = 0; q < taxi_queries; ++q) {
      taxi_query_options o;
      o.query = q;
      o.cache.cache_bytes = 32ull << 20;
      o.cache.page_size = 4096;
      o.direct_tier = mode < 2;
      o.sparse_gather = mode == 0;
      o.cache.odirect = mode == 3;
      const taxi_query_report r = run_taxi_query_gpu(cf, o);
      const taxi_query_result want = taxi_reference(cf, q);
      EXPECT_EQ(r.result.failed, 0u) << "Q" << q << " mode " << mode;
      if (mode >= 2) EXPECT_EQ(r.direct_columns, 0u);
      if (mode == 0 && r.direct_columns == uint32_t(q + 1)) EXPECT_EQ(r.sparse_reads, want.selected * uint64_t(q));
      if (mode != 0) EXPECT_EQ(r.sparse_reads, 0u);
      EXPECT_EQ(r.result.selected, want.selected) << "Q" << q;
      EXPECT_EQ(r.result.distance, want.distance) << "Q" << q;
      EXPECT_EQ(r.result.net, want.net) << "Q" << q;
      EXPECT_GT(want.selected, 1000u);
      EXPECT_GE(r.bytes_read, rows * 4) << "Q" << q;
      if (q == 0) EXPECT_LE(r.bytes_read, r.bytes_tiling * 101 / 100);
      else EXPECT_LT(r.bytes_read, r.bytes_tiling) << "Q" << q;
    }
}
