// A column store deepwell reads in place (docs/analytics.md): one file, a
// 4 KiB-aligned header, then one section per column, each 4 KiB-aligned so
// that a column is a dataset of its own (a file range: file_options'
// offset and length, or a server's dataset offset/length) and element 0
// starts a page. Fixed-width little-endian values only; decimals are
// integers with a scale (cents: scale 2), timestamps microseconds since the
// epoch. Optional statistics: each row group's minimum and maximum.
//
//   [0, 4096 * k)   header: column_file_header, then ncols column_desc
//   sections        column data, rows * width bytes each, 4 KiB-aligned
//   statistics      per column that has them: row_groups x (int64 min, int64 max)
//   sums            (version 2) a CRC-32C a 4 KiB block of each column's
//                   section, in column order, in block_sum()'s stored form
//                   (deepwell/targets/file_sums.hpp)
//
// Version 2 also keeps two CRC-32Cs in the header: header_crc over the
// header, the descriptors and every column's statistics (a wrong minimum
// would prune row groups silently), sums_crc over the sums. Version 1
// files (no sums) are still read, unchecked.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepwell::table {

enum class column_type : uint8_t {
  int8 = 1, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64,
  decimal32,     // int32 / 10^scale
  decimal64,     // int64 / 10^scale
  timestamp_us,  // int64 microseconds since 1970-01-01 UTC
};
uint32_t type_width(column_type t);
const char* type_name(column_type t);
bool type_is_integer(column_type t);  // decimals and timestamps included (statistics are kept as int64)

constexpr char column_file_magic[8] = {'D', 'W', 'C', 'O', 'L', 'S', '0', '1'};
constexpr uint32_t column_file_version = 2;            // what the writers write
constexpr uint32_t column_file_version_unchecked = 1;  // no sums: still read
constexpr uint64_t column_align = 4096;
constexpr uint32_t column_name_bytes = 48;  // NUL included

// On-disk header (little-endian, packed by construction: 64 bytes).
struct column_file_header {
  char magic[8];
  uint32_t version;
  uint32_t ncols;
  uint64_t rows;
  uint64_t row_group_rows;  // statistics granularity (0: no statistics)
  uint64_t header_bytes;    // header and descriptors, rounded up to column_align
  uint64_t file_bytes;      // the whole file, statistics and sums included
  // Version 2 (zeros in version 1):
  uint64_t sums_offset;     // the sums section (a multiple of column_align)
  uint32_t sums_crc;        // CRC-32C of the sums (4 bytes a block of every column)
  uint32_t header_crc;      // CRC-32C of this header (header_crc 0), the descriptors and the statistics
};
static_assert(sizeof(column_file_header) == 64);

// On-disk column descriptor (96 bytes).
struct column_desc {
  char name[column_name_bytes];  // NUL-terminated, unique
  uint8_t type;                  // column_type
  uint8_t width;                 // bytes per value (type_width(type))
  int8_t scale;                  // decimals: digits after the point
  uint8_t has_stats;
  uint32_t reserved0;
  uint64_t offset;               // section start (multiple of column_align)
  uint64_t bytes;                // rows * width
  uint64_t stats_offset;         // row_groups x 16 bytes, or 0
  uint64_t reserved1[2];
};
static_assert(sizeof(column_desc) == 96);

struct column_info {
  std::string name;
  column_type type;
  uint32_t width;
  int scale;
  uint64_t offset, bytes;
  bool has_stats;
  uint64_t stats_offset;
  uint64_t first_sum = 0;  // version 2: its first block's sum in the sums section
};

// A column file's layout, read and checked: every error names the file (and
// the column where one is at fault).
class column_file {
 public:
  // Throws deepwell::error on a missing or short file, a bad magic or
  // version, a section outside the file or of the wrong size, a bad type,
  // an unterminated or duplicate name, and (version 2) a header,
  // descriptor, statistic or sum that does not match its checksum. The
  // statistics are read (and checked) here.
  static column_file open(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t rows() const { return rows_; }
  uint64_t row_group_rows() const { return row_group_rows_; }
  const std::vector<column_info>& columns() const { return cols_; }
  // Throws deepwell::error naming the file, the column and the columns there are.
  const column_info& column(const std::string& name) const;
  // Throws unless the column has this type (a clear type-mismatch error).
  const column_info& column(const std::string& name, column_type want) const;
  // Row group g's (min, max) of a column with statistics.
  std::vector<std::pair<int64_t, int64_t>> stats(const std::string& name) const;

  uint32_t version() const { return version_; }
  // Version 2: the columns have block sums (version 1 files are read unchecked).
  bool checksummed() const { return version_ >= 2; }
  // A column's block sums (a copy; empty in version 1): what a checked
  // dataset of its section needs (file_sums.hpp).
  std::vector<uint32_t> column_sums(const column_info& c) const;
  // Where in the file a column's sums start (version 2).
  uint64_t column_sums_at(const column_info& c) const { return sums_at_ + 4 * c.first_sum; }
  // Checks every 4 KiB block of the named column (all columns when `name`
  // is empty) against its sum, on `threads` threads (0: every core); throws
  // deepwell::error naming the file, the column and the bytes of the first
  // bad block. False (and no check) for a version-1 file. Readers of the
  // file's bytes outside the controller (the plain scans, Python) call it
  // before they use a column.
  bool verify(const std::string& name = "", unsigned threads = 0) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t rows_ = 0, row_group_rows_ = 0;
  std::vector<column_info> cols_;
  std::vector<std::vector<int64_t>> stats_;  // per column: row groups x (min, max), read at open
  std::vector<uint32_t> sums_;               // version 2: the sums section
  uint64_t sums_at_ = 0;                     // where it is in the file
  void read_stats(int fd);
  void check_sums(int fd, const column_file_header& h, const std::vector<column_desc>& d, uint64_t size);
};

// Writes a column file from columns produced in row blocks: the caller
// declares the columns, then writes each column's bytes for rows
// [r, r + n) in any order (pwrite at the section's place; thread-safe for
// disjoint ranges), then finish() writes statistics (computed from the
// data written, when row_group_rows > 0) and syncs. The file is written as
// path + ".partial" and renamed over `path` by finish(): a write that fails
// (a full disk) leaves a file that was there as it was.
class column_file_writer {
 public:
  struct column_spec {
    std::string name;
    column_type type;
    int scale = 0;
  };
  column_file_writer(const std::string& path, uint64_t rows, std::vector<column_spec> cols,
                     uint64_t row_group_rows = 1 << 20);
  ~column_file_writer();
  column_file_writer(const column_file_writer&) = delete;
  column_file_writer& operator=(const column_file_writer&) = delete;

  const std::vector<column_info>& columns() const { return cols_; }
  // Values of column `col` for rows [first_row, first_row + n): n * width bytes.
  void write(uint32_t col, uint64_t first_row, uint64_t n, const void* values);
  void finish();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool finished_ = false;
  uint64_t rows_, row_group_rows_, header_bytes_, sums_offset_ = 0, file_bytes_;
  std::vector<column_info> cols_;
  struct stats_state;  // per column, per row group: (min, max) of what was written
  std::unique_ptr<stats_state> stats_;
};

}  // namespace deepwell::table
