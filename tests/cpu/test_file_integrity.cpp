// The stored graph (.dwg) and column files when their bytes go bad (issue
// 44): for every region of each format (header, each data section, its
// padding, statistics, the sums section, past the end) a flipped byte, a
// zeroed 4 KiB block, a truncation and appended bytes give an error naming
// the file, or exactly the data written: never other data. Both readers:
// the CPU path (open, verify(), then the mapping) and reads through the
// controller (checked datasets: a bad block is a guard check error). The
// data checks run before any logic check (check(), statistics) could
// catch the damage by luck. Version-1 files (no sums) still open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/crc32c.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/checked_runs.hpp"
#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/table/column_file.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "deepwell/targets/target.hpp"
#include "cache_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

using test::read_all;
using test::write_all;

// One damage to a file image: flip a byte, zero the 4 KiB block around it,
// cut the file there, or append bytes.
enum class damage { flip, zero_block, truncate, append };
const char* damage_name(damage d) {
  return d == damage::flip ? "flip" : d == damage::zero_block ? "zero 4 KiB" : d == damage::truncate ? "truncate" : "append";
}
std::vector<uint8_t> damaged(std::vector<uint8_t> img, damage d, uint64_t at) {
  switch (d) {
    case damage::flip: img[at] ^= 0x20; break;
    case damage::zero_block: {
      const uint64_t b = at / 4096 * 4096;
      std::memset(img.data() + b, 0, std::min<uint64_t>(4096, img.size() - b));
      break;
    }
    case damage::truncate: img.resize(at); break;
    case damage::append: img.insert(img.end(), 100, 0x5A); break;
  }
  return img;
}

struct region {
  std::string name;
  uint64_t at;
};

// Runs `read` (returns "" when the data it read equals the original, else
// what differs) on the file damaged every way in every region; each case
// must throw an error naming the file, or read the right data.
void sweep(const std::string& path, const std::vector<uint8_t>& good, const std::vector<region>& regions,
           const std::string& reader, const std::function<std::string()>& read, unsigned* errors = nullptr) {
  for (const region& r : regions)
    for (damage d : {damage::flip, damage::zero_block, damage::truncate, damage::append}) {
      if (r.at >= good.size() && d != damage::append) continue;
      write_all(path, damaged(good, d, r.at));
      const std::string what = reader + ", " + damage_name(d) + " at " + r.name + " (byte " + std::to_string(r.at) + ")";
      try {
        const std::string wrong = read();
        EXPECT_EQ(wrong, "") << what << ": silently wrong data";
      } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
        if (errors) ++*errors;
      }
    }
  write_all(path, good);
}

// Reads a whole dataset through the cache on this thread; throws on a failed read.
template <class T>
std::vector<T> read_through(page_cache& cache, uint32_t nsid, const std::string& path) {
  array<T> a(std::shared_ptr<page_cache>(&cache, [](page_cache*) {}), nsid);
  std::vector<T> out(a.ref().size());
  const request_status s = a.ref().read_range(out.data(), 0, out.size());
  if (!s.ok())
    throw error(path + ": read through the cache: " + describe(s) + (corrupt_block(s) ? " (checksum)" : ""));
  return out;
}

// ---- graphs ----

graph::csr_graph small_graph() {
  graph::csr_graph g;
  g.nodes = 3001;  // offsets: 24016 bytes, a partial last block
  g.weights = graph::weight_type::u32;
  std::mt19937_64 rng(44);
  g.offsets.push_back(0);
  for (uint64_t v = 0; v < g.nodes; ++v) {
    const uint64_t d = rng() % 9;
    for (uint64_t i = 0; i < d; ++i) {
      g.nbr32.push_back(uint32_t(rng() % g.nodes));
      g.wts.push_back(uint32_t(rng() % 100 + 1));
    }
    g.offsets.push_back(g.nbr32.size());
  }
  g.origin = "integrity test";
  return g;
}

std::string graph_differs(const graph::csr_graph& a, const graph::csr_graph& b) {
  if (a.nodes != b.nodes || a.offsets != b.offsets) return "offsets differ";
  if (a.nbr32 != b.nbr32) return "neighbours differ";
  if (a.wts != b.wts) return "weights differ";
  if (a.flags != b.flags || a.origin != b.origin || a.seed != b.seed) return "header fields differ";
  return "";
}

std::vector<region> graph_regions(const graph::csr_header& h) {
  const graph::csr_layout l = graph::layout_for(h.nodes, h.edges, h.id_bytes, h.weights);
  const uint64_t off_bytes = (h.nodes + 1) * 8, nbr_bytes = h.edges * 4;
  return {{"header magic", 0},
          {"header nodes", offsetof(graph::csr_header, nodes)},
          {"header flags", offsetof(graph::csr_header, flags)},
          {"header origin", offsetof(graph::csr_header, origin) + 3},
          {"header sums_crc", offsetof(graph::csr_header, sums_crc)},
          {"header padding", 3000},
          {"offsets start", l.offsets_at + 9},
          {"offsets last block", l.offsets_at + off_bytes - 5},
          {"offsets padding", l.offsets_at + off_bytes + 7},
          {"neighbours middle", l.neighbours_at + nbr_bytes / 2},
          {"neighbours last block", l.neighbours_at + nbr_bytes - 2},
          {"neighbours padding", l.neighbours_at + nbr_bytes + 100},
          {"weights", l.weights_at + 4097},
          {"sums", l.sums_at + 6},
          {"sums padding", l.sums_at + l.sums_bytes + 10},
          {"end", l.file_bytes}};
}

TEST(GraphFileIntegrity, EveryDamageIsAnErrorOrTheRightGraph) {
  test::scratch_file f("integrity.dwg");
  const graph::csr_graph g = small_graph();
  graph::write_csr(f.path(), g);
  const std::vector<uint8_t> good = read_all(f.path());
  const std::vector<region> regions = graph_regions(graph::csr_file(f.path()).header());
  unsigned errors = 0;
  // The CPU readers: open, verify every block, then the mapping.
  sweep(f.path(), good, regions, "csr_file", [&] {
    graph::csr_file x(f.path());
    EXPECT_TRUE(x.verify(2));
    return graph_differs(x.load(), g);
  }, &errors);
  EXPECT_GT(errors, 30u);
  // Through the controller: each section a checked dataset; no verify(),
  // so a bad block reaches the cache as a failed read. Pages of 4 KiB read
  // whole sum blocks; pages of 512 bytes read part of one (the target
  // reads and checks the whole block).
  for (const uint32_t page : {4096u, 512u}) {
  errors = 0;
  sweep(f.path(), good, regions, "graph_arrays, pages of " + std::to_string(page), [&] {
    graph::csr_file x(f.path());
    controller ctl;
    auto cache = make_host_page_cache(ctl, test::small_cache(16 * 4096 / page, page));
    graph::graph_dataset_options o;
    o.check_offsets = false;
    o.block_size = page;
    graph::graph_arrays a(cache, x, o);
    (void)a;
    // The sections graph_arrays made.
    using graph::csr_section;
    graph::csr_graph r = g;
    r.offsets = read_through<uint64_t>(*cache, a.section_namespace(csr_section::offsets), f.path());
    r.nbr32 = read_through<uint32_t>(*cache, a.section_namespace(csr_section::neighbours), f.path());
    r.wts = read_through<uint32_t>(*cache, a.section_namespace(csr_section::weights), f.path());
    const graph::csr_header& h = x.header();
    r.origin = std::string(h.origin, strnlen(h.origin, sizeof h.origin));
    r.flags = h.flags;
    r.nodes = h.nodes;
    r.seed = h.seed;
    return graph_differs(r, g);
  }, &errors);
  EXPECT_GT(errors, 30u);
  }
}

TEST(GraphFileIntegrity, ABadBlockIsAGuardErrorNamingTheFileInTheCheckedRuns) {
  test::scratch_file f("bad-block.dwg");
  graph::write_csr(f.path(), small_graph());
  const graph::csr_header h = graph::csr_file(f.path()).header();
  std::vector<uint8_t> img = read_all(f.path());
  img[h.neighbours_at + 4 * 1000] ^= 1;  // a neighbour id still in range: check() cannot see it
  write_all(f.path(), img);
  graph::csr_file x(f.path());
  EXPECT_NO_THROW(x.check(1));
  try {
    x.verify(1);
    ADD_FAILURE() << "verify() passed a flipped neighbour";
  } catch (const data_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(f.path() + ": neighbours section: bytes [" + std::to_string(h.neighbours_at) + ", " +
                     std::to_string(h.neighbours_at + 4096) + ")"),
              std::string::npos)
        << m;
  }
  controller ctl;
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  graph::graph_arrays a(cache, x);
  graph::cpu_exec ex(2);
  graph::bfs_options o;
  o.source = 0;
  try {
    (void)graph::connected_components(ex, a, x.header().flags);
    ADD_FAILURE() << "connected components ran over a corrupt block";
  } catch (const error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(f.path()), std::string::npos) << m;
    EXPECT_NE(m.find("does not match its checksum"), std::string::npos) << m;
  }
}

TEST(GraphFileIntegrity, TheDirectTierGetsOnlyACheckedMapping) {
  test::scratch_file f("direct.dwg");
  graph::write_csr(f.path(), small_graph());
  graph::csr_file x(f.path());
  auto section = [&] {
    file_options fo;
    fo.offset = x.section_at(graph::csr_section::neighbours);
    fo.length = x.section_bytes(graph::csr_section::neighbours);
    return checked_section(open_file_target(f.path(), fo), x.section_sums(graph::csr_section::neighbours));
  };
  auto m = section()->map_readonly();
  if (m) EXPECT_EQ(m->bytes, x.neighbours_bytes());  // (none if the file is not wholly resident)
  std::vector<uint8_t> img = read_all(f.path());
  img[x.header().neighbours_at + 77] ^= 4;
  write_all(f.path(), img);
  EXPECT_EQ(section()->map_readonly(), nullptr) << "a corrupt section's mapping was handed out";
}

TEST(GraphFileIntegrity, VersionOneFilesOpenUncheckedAndUnknownVersionsAreRefused) {
  test::scratch_file f("v1.dwg");
  const graph::csr_graph g = small_graph();
  graph::write_csr(f.path(), g);
  std::vector<uint8_t> img = read_all(f.path());
  graph::csr_header h;
  std::memcpy(&h, img.data(), sizeof h);
  const graph::csr_layout v1 = graph::layout_for(h.nodes, h.edges, h.id_bytes, h.weights, 1);
  h.version = 1;
  h.sums_at = h.sums_bytes = 0;
  h.sums_crc = h.header_crc = 0;
  h.file_bytes = v1.file_bytes;
  std::memcpy(img.data(), &h, sizeof h);
  img.resize(v1.file_bytes);
  write_all(f.path(), img);
  {
    graph::csr_file x(f.path());
    EXPECT_FALSE(x.checksummed());
    EXPECT_FALSE(x.verify());
    EXPECT_EQ(graph_differs(x.load(), g), "");
    controller ctl;
    auto cache = make_host_page_cache(ctl, test::small_cache(16));
    graph::graph_arrays a(cache, x);
    EXPECT_EQ(read_through<uint32_t>(*cache, a.section_namespace(graph::csr_section::neighbours), f.path()), g.nbr32);
  }
  h.version = 3;
  std::memcpy(img.data(), &h, sizeof h);
  write_all(f.path(), img);
  try {
    graph::csr_file x(f.path());
    ADD_FAILURE() << "version 3 opened";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("graph format version 3, this build reads versions 1 and 2"),
              std::string::npos)
        << e.what();
  }
}

// ---- column files ----

struct column_case {
  std::vector<int32_t> a;   // int32, statistics
  std::vector<int64_t> b;   // int64, statistics
  std::vector<float> c;     // float32, none
};
constexpr uint64_t col_rows = 3001, col_group = 1000;

column_case write_columns(const std::string& path) {
  column_case k;
  std::mt19937_64 rng(7);
  for (uint64_t r = 0; r < col_rows; ++r) {
    k.a.push_back(int32_t(rng() % 100000) - 50000);
    k.b.push_back(int64_t(rng() % 1000000007));
    k.c.push_back(float(rng() % 1000) / 8);
  }
  using table::column_type;
  table::column_file_writer w(path, col_rows, {{"a", column_type::int32}, {"b", column_type::int64}, {"c", column_type::float32}},
                              col_group);
  w.write(1, 0, col_rows, k.b.data());  // in any order, in pieces
  w.write(0, 1500, col_rows - 1500, k.a.data() + 1500);
  w.write(0, 0, 1500, k.a.data());
  w.write(2, 0, col_rows, k.c.data());
  w.finish();
  return k;
}

template <class T>
std::vector<std::pair<int64_t, int64_t>> expected_stats(const std::vector<T>& v) {
  std::vector<std::pair<int64_t, int64_t>> s;
  for (uint64_t g = 0; g < v.size(); g += col_group) {
    const auto e = v.begin() + int64_t(std::min<uint64_t>(v.size(), g + col_group));
    s.push_back({*std::min_element(v.begin() + int64_t(g), e), *std::max_element(v.begin() + int64_t(g), e)});
  }
  return s;
}

template <class T>
std::vector<T> pread_column(const std::string& path, const table::column_info& c) {
  std::vector<T> v(c.bytes / sizeof(T));
  const int fd = ::open(path.c_str(), O_RDONLY);
  const bool ok = ::pread(fd, v.data(), c.bytes, off_t(c.offset)) == ssize_t(c.bytes);
  ::close(fd);
  if (!ok) throw error(path + ": short read");
  return v;
}

std::string columns_differ(const table::column_file& f, const column_case& k, const std::vector<int32_t>& a,
                           const std::vector<int64_t>& b, const std::vector<float>& c) {
  if (f.rows() != col_rows) return "rows differ";
  if (a != k.a) return "column a differs";
  if (b != k.b) return "column b differs";
  if (c != k.c) return "column c differs";
  if (f.stats("a") != expected_stats(k.a) || f.stats("b") != expected_stats(k.b)) return "statistics differ";
  if (f.column("a").type != table::column_type::int32 || f.column("c").type != table::column_type::float32)
    return "types differ";
  return "";
}

std::vector<region> column_regions(const std::string& path) {
  const table::column_file f = table::column_file::open(path);
  const auto& a = f.column("a");
  const auto& b = f.column("b");
  const auto& c = f.column("c");
  table::column_file_header h;
  const std::vector<uint8_t> img = read_all(path);
  std::memcpy(&h, img.data(), sizeof h);
  return {{"header magic", 0},
          {"header rows", offsetof(table::column_file_header, rows)},
          {"header sums_offset", offsetof(table::column_file_header, sums_offset)},
          {"descriptor a name", 64},
          {"descriptor b offset", 64 + 96 + offsetof(table::column_desc, offset)},
          {"descriptor c scale", 64 + 192 + offsetof(table::column_desc, scale)},
          {"header padding", 2000},
          {"column a", a.offset + 5},
          {"column a last block", a.offset + a.bytes - 1},
          {"column a padding", a.offset + a.bytes + 3},
          {"column b", b.offset + 8 * 2500 + 2},
          {"column c", c.offset + 4 * 100},
          {"statistics of a, group 1's max", a.stats_offset + 16 + 8},
          {"statistics of b", b.stats_offset + 3},
          {"sums", h.sums_offset + 9},
          {"sums padding", h.sums_offset + 200},
          {"end", h.file_bytes}};
}

TEST(ColumnFileIntegrity, EveryDamageIsAnErrorOrTheRightTable) {
  test::scratch_file f("integrity.dwcol");
  const column_case k = write_columns(f.path());
  const std::vector<uint8_t> good = read_all(f.path());
  const std::vector<region> regions = column_regions(f.path());
  unsigned errors = 0;
  sweep(f.path(), good, regions, "column_file", [&] {
    const table::column_file x = table::column_file::open(f.path());
    EXPECT_TRUE(x.verify("", 2));
    return columns_differ(x, k, pread_column<int32_t>(f.path(), x.column("a")),
                          pread_column<int64_t>(f.path(), x.column("b")), pread_column<float>(f.path(), x.column("c")));
  }, &errors);
  EXPECT_GT(errors, 40u);
  // Through the controller: each column a checked dataset, no verify().
  errors = 0;
  sweep(f.path(), good, regions, "checked datasets", [&] {
    const table::column_file x = table::column_file::open(f.path());
    controller ctl;
    auto ns = [&](const std::string& name) {
      const table::column_info& c = x.column(name);
      file_options fo;
      fo.offset = c.offset;
      fo.length = c.bytes;
      return ctl.add_namespace({checked_section(open_file_target(f.path(), fo), x.column_sums(c)), 4096, true});
    };
    const uint32_t na = ns("a"), nb = ns("b"), nc = ns("c");
    auto cache = make_host_page_cache(ctl, test::small_cache(16));
    return columns_differ(x, k, read_through<int32_t>(*cache, na, f.path()), read_through<int64_t>(*cache, nb, f.path()),
                          read_through<float>(*cache, nc, f.path()));
  }, &errors);
  EXPECT_GT(errors, 30u);
}

TEST(ColumnFileIntegrity, VersionOneFilesOpenUncheckedAndUnknownVersionsAreRefused) {
  test::scratch_file f("v1.dwcol");
  const column_case k = write_columns(f.path());
  std::vector<uint8_t> img = read_all(f.path());
  table::column_file_header h;
  std::memcpy(&h, img.data(), sizeof h);
  const table::column_file v2 = table::column_file::open(f.path());
  uint64_t end = 0;  // version 1 ends where its statistics do (4 row groups of 1000 in 3001 rows)
  for (const auto& c : v2.columns()) end = std::max(end, c.has_stats ? c.stats_offset + 4 * 16 : c.offset + c.bytes);
  h.version = 1;
  h.file_bytes = end;
  h.sums_offset = 0;
  h.sums_crc = h.header_crc = 0;
  std::memcpy(img.data(), &h, sizeof h);
  img.resize(end);
  write_all(f.path(), img);
  {
    const table::column_file x = table::column_file::open(f.path());
    EXPECT_FALSE(x.checksummed());
    EXPECT_FALSE(x.verify());
    EXPECT_EQ(columns_differ(x, k, pread_column<int32_t>(f.path(), x.column("a")),
                             pread_column<int64_t>(f.path(), x.column("b")), pread_column<float>(f.path(), x.column("c"))),
              "");
  }
  h.version = 3;
  std::memcpy(img.data(), &h, sizeof h);
  write_all(f.path(), img);
  try {
    (void)table::column_file::open(f.path());
    ADD_FAILURE() << "version 3 opened";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("column file version 3, this library reads versions 1 and 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(ColumnFileIntegrity, TheTaxiRunnersReportACorruptColumnNamingTheFile) {
  test::scratch_file f("taxi.dwcol");
  table::generate_taxi(f.path(), {20000, 3, 2, 4096, nullptr});
  const table::column_file good = table::column_file::open(f.path());
  const table::column_info& d = good.column(table::taxi_query_columns[0]);
  std::vector<uint8_t> img = read_all(f.path());
  img[d.offset + 4 * 5000 + 1] ^= 0x40;  // a trip's distance, 163.84 miles off
  write_all(f.path(), img);
  const table::column_file x = table::column_file::open(f.path());
  table::taxi_query_options o;
  o.query = 0;
  o.workers = 2;
  o.cache.cache_bytes = 64 * 4096;
  const table::taxi_query_report r = table::run_taxi_query_cpu(x, o);
  EXPECT_GT(r.result.failed, 0u);
  EXPECT_NE(r.error.find(f.path()), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("does not match its checksum"), std::string::npos) << r.error;
  try {
    (void)table::taxi_reference(x, 0);
    ADD_FAILURE() << "the plain scan read a corrupt column";
  } catch (const data_error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path() + ": column 'trip_distance': bytes ["), std::string::npos)
        << e.what();
  }
}

}  // namespace

// CRC-32C against its check value and a bytewise reference, at every
// length around the instruction path's three-stream runs (4080 bytes) and
// from unaligned starts, and chained: the sum of A then B is that of A||B.
TEST(Crc32c, MatchesTheReferenceAtEveryLengthAndAlignment) {
  auto reference = [](uint32_t crc, const uint8_t* p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) {
      crc ^= p[i];
      for (int k = 0; k < 8; ++k) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
  };
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  std::vector<uint8_t> buf(3 * 4096 + 64);
  std::mt19937_64 rng(7);
  for (auto& b : buf) b = uint8_t(rng());
  for (size_t start : {size_t(0), size_t(1), size_t(5)})
    for (size_t n : {size_t(0), size_t(7), size_t(8), size_t(4079), size_t(4080), size_t(4081), size_t(4096),
                     size_t(8160), size_t(8161), size_t(3 * 4096)}) {
      const uint8_t* p = buf.data() + start;
      EXPECT_EQ(crc32c(0, p, n), reference(0, p, n)) << "start " << start << ", " << n << " bytes";
      const size_t half = n / 3;
      EXPECT_EQ(crc32c(crc32c(0, p, half), p + half, n - half), reference(0, p, n)) << "chained, " << n << " bytes";
    }
}
