// The column store's layout: reading and checking a file's header, and
// writing one (column_file.hpp).
#include "common/file_io.hpp"
#include "common/mapping_guard.hpp"
#include "deepwell/table/column_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/file_sums.hpp"

namespace deepwell::table {
namespace {

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
// Row groups of `group` rows in `rows` (rounded up without overflowing).
uint64_t row_groups(uint64_t rows, uint64_t group) { return rows / group + (rows % group != 0); }

using ::deepwell::detail::pread_all;
using ::deepwell::detail::pwrite_all;

// header_crc of version 2: the header (header_crc 0), the descriptors,
// then each column's statistics in column order.
uint32_t header_crc(column_file_header h, const void* descs, uint64_t desc_bytes,
                    const std::vector<std::vector<int64_t>>& stats) {
  h.header_crc = 0;
  uint32_t crc = crc32c(0, &h, sizeof h);
  crc = crc32c(crc, descs, desc_bytes);
  for (const std::vector<int64_t>& st : stats) crc = crc32c(crc, st.data(), st.size() * 8);
  return crc;
}

// The sums section's place for columns ending (statistics included) at
// `data_end`, and the file's size after it.
uint64_t total_sums(const std::vector<column_info>& cols) {
  uint64_t n = 0;
  for (const column_info& c : cols) n += section_sum_count(c.bytes);
  return n;
}

// A read-only mapping of a whole file, unmapped when it goes.
struct file_mapping {
  const uint8_t* p = nullptr;
  uint64_t bytes = 0;
  file_mapping(const std::string& path, uint64_t size) : bytes(size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error(errno_message("open " + path, errno));
    void* m = size ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
    const int e = errno;
    ::close(fd);
    if (m == MAP_FAILED) throw error(errno_message("mmap " + path, e));
    p = static_cast<const uint8_t*>(m);
    guard = detail::guarded_range(p, size);
  }
  ~file_mapping() {
    guard = detail::guarded_range();
    if (p) ::munmap(const_cast<uint8_t*>(p), bytes);
  }
  // Throws where the file was cut short while mapped (its lost pages read as zeros).
  void check_whole(const std::string& path) const {
    if (guard.cut()) throw error(path + ": the file was truncated while it was being read");
  }
  detail::guarded_range guard;
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
};

template <class T>
void min_max(const void* v, uint64_t n, int64_t& lo, int64_t& hi) {
  const T* p = static_cast<const T*>(v);
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t x = int64_t(p[i]);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
}

void min_max(column_type t, const void* v, uint64_t n, int64_t& lo, int64_t& hi) {
  switch (t) {
    case column_type::int8: return min_max<int8_t>(v, n, lo, hi);
    case column_type::int16: return min_max<int16_t>(v, n, lo, hi);
    case column_type::int32: case column_type::decimal32: return min_max<int32_t>(v, n, lo, hi);
    case column_type::int64: case column_type::decimal64: case column_type::timestamp_us:
      return min_max<int64_t>(v, n, lo, hi);
    case column_type::uint8: return min_max<uint8_t>(v, n, lo, hi);
    case column_type::uint16: return min_max<uint16_t>(v, n, lo, hi);
    case column_type::uint32: return min_max<uint32_t>(v, n, lo, hi);
    case column_type::uint64: return min_max<uint64_t>(v, n, lo, hi);  // clamps past INT64_MAX
    default: return;
  }
}

}  // namespace

uint32_t type_width(column_type t) {
  switch (t) {
    case column_type::int8: case column_type::uint8: return 1;
    case column_type::int16: case column_type::uint16: return 2;
    case column_type::int32: case column_type::uint32: case column_type::float32: case column_type::decimal32: return 4;
    case column_type::int64: case column_type::uint64: case column_type::float64: case column_type::decimal64:
    case column_type::timestamp_us: return 8;
  }
  return 0;
}

const char* type_name(column_type t) {
  switch (t) {
    case column_type::int8: return "int8";
    case column_type::int16: return "int16";
    case column_type::int32: return "int32";
    case column_type::int64: return "int64";
    case column_type::uint8: return "uint8";
    case column_type::uint16: return "uint16";
    case column_type::uint32: return "uint32";
    case column_type::uint64: return "uint64";
    case column_type::float32: return "float32";
    case column_type::float64: return "float64";
    case column_type::decimal32: return "decimal32";
    case column_type::decimal64: return "decimal64";
    case column_type::timestamp_us: return "timestamp_us";
  }
  return "unknown";
}

bool type_is_integer(column_type t) { return t != column_type::float32 && t != column_type::float64; }

column_file column_file::open(const std::string& path) {
  const detail::opened_file file = detail::open_for_reading(path, "column file");
  const int fd = file.fd.get();
  const uint64_t size = uint64_t(file.st.st_size);
  if (size < sizeof(column_file_header))
    throw error(path + ": not a column file (" + std::to_string(size) + " bytes, shorter than its header)");
  column_file_header h{};
  pread_all(fd, &h, sizeof h, 0, path);
  if (std::memcmp(h.magic, column_file_magic, sizeof h.magic) != 0)
    throw error(path + ": not a column file (bad magic; deepwell column files start with DWCOLS01)");
  if (h.version != column_file_version && h.version != column_file_version_unchecked)
    throw error(path + ": column file version " + std::to_string(h.version) + ", this library reads versions " +
                std::to_string(column_file_version_unchecked) + " and " + std::to_string(column_file_version) +
                " (a newer deepwell's file, or a corrupt header)");
  // A version-1 file has zeros where version 2 keeps its sums: a "1" with
  // them set is a damaged version word, not an unchecked file.
  if (h.version == column_file_version_unchecked && (h.sums_offset || h.sums_crc || h.header_crc))
    throw data_error(path + ": the header says version 1 (no checksums) but holds version 2's checksum fields: a "
                            "corrupt column file");
  if (h.ncols == 0 || h.ncols > 4096) throw error(path + ": header says " + std::to_string(h.ncols) + " columns");
  const uint64_t need_header = round_up(sizeof h + uint64_t(h.ncols) * sizeof(column_desc), column_align);
  if (h.header_bytes != need_header || h.header_bytes > size)
    throw error(path + ": header size " + std::to_string(h.header_bytes) + " does not match " +
                std::to_string(h.ncols) + " columns (" + std::to_string(need_header) + " bytes) or the file (" +
                std::to_string(size) + " bytes)");
  if (h.file_bytes != size)
    throw error(path + ": header says the file has " + std::to_string(h.file_bytes) + " bytes, it has " +
                std::to_string(size) + " (truncated or appended to?)");
  std::vector<column_desc> d(h.ncols);
  pread_all(fd, d.data(), d.size() * sizeof(column_desc), sizeof h, path);
  column_file f;
  f.path_ = path;
  f.version_ = h.version;
  f.rows_ = h.rows;
  f.row_group_rows_ = h.row_group_rows;
  std::set<std::string> names;
  for (uint32_t i = 0; i < h.ncols; ++i) {
    const column_desc& c = d[i];
    if (std::memchr(c.name, 0, sizeof c.name) == nullptr || c.name[0] == 0)
      throw error(path + ": column " + std::to_string(i) + " has an empty or unterminated name");
    const std::string name(c.name);
    const std::string where = path + ": column '" + name + "'";
    if (!names.insert(name).second) throw error(where + " appears twice");
    const auto t = column_type(c.type);
    const uint32_t w = type_width(t);
    if (w == 0) throw error(where + ": unknown type code " + std::to_string(c.type));
    if (c.width != w)
      throw error(where + ": width " + std::to_string(c.width) + " does not match its type " + type_name(t));
    if (c.offset % column_align || c.offset < h.header_bytes)
      throw error(where + ": section offset " + std::to_string(c.offset) + " is not a 4 KiB boundary past the header");
    // Sizes from the file are checked without wrapping: a header whose rows
    // times the width overflow 64 bits would otherwise pass as small.
    uint64_t need = 0;
    const bool wraps = __builtin_mul_overflow(h.rows, uint64_t(w), &need);
    if (wraps || c.bytes != need)
      throw error(where + ": section of " + std::to_string(c.bytes) + " bytes, but " + std::to_string(h.rows) +
                  " rows of " + std::to_string(w) + " bytes need " +
                  (wraps ? std::string("more than 2^64") : std::to_string(need)));
    if (c.bytes > size || c.offset > size - c.bytes)
      throw error(where + ": section at " + std::to_string(c.offset) + " of " + std::to_string(c.bytes) +
                  " bytes runs past the end of the file (" + std::to_string(size) + " bytes)");
    if (c.has_stats) {
      if (h.row_group_rows == 0) throw error(where + ": statistics without a row-group size");
      const uint64_t groups = row_groups(h.rows, h.row_group_rows);
      if (c.stats_offset < h.header_bytes || c.stats_offset > size || groups > (size - c.stats_offset) / 16)
        throw error(where + ": statistics outside the file");
    }
    f.cols_.push_back({name, t, w, int(c.scale), c.offset, c.bytes, c.has_stats != 0, c.stats_offset, 0});
  }
  f.read_stats(fd);
  if (f.checksummed()) f.check_sums(fd, h, d, size);
  return f;
}

void column_file::read_stats(int fd) {
  stats_.resize(cols_.size());
  for (size_t i = 0; i < cols_.size(); ++i)
    if (cols_[i].has_stats) {
      stats_[i].resize(row_groups(rows_, row_group_rows_) * 2);
      pread_all(fd, stats_[i].data(), stats_[i].size() * 8, cols_[i].stats_offset, path_);
    }
}

// Version 2: the header's checksum (over the statistics too), the sums
// section's place and checksum; the sums are kept.
void column_file::check_sums(int fd, const column_file_header& h, const std::vector<column_desc>& d, uint64_t size) {
  if (header_crc(h, d.data(), d.size() * sizeof(column_desc), stats_) != h.header_crc)
    throw data_error(path_ + ": the header, column descriptors or statistics do not match their checksum: a corrupt "
                "column file");
  uint64_t data_end = h.header_bytes;
  for (const column_info& c : cols_) {
    data_end = std::max(data_end, c.offset + c.bytes);
    if (c.has_stats) data_end = std::max(data_end, c.stats_offset + row_groups(rows_, row_group_rows_) * 16);
  }
  const uint64_t n = total_sums(cols_);
  if (h.sums_offset % column_align || h.sums_offset < data_end || h.sums_offset > size || n > (size - h.sums_offset) / 4)
    throw error(path_ + ": the sums section at " + std::to_string(h.sums_offset) + " (" + std::to_string(n * 4) +
                " bytes) is not past the columns (" + std::to_string(data_end) + ") or not inside the file");
  sums_.resize(n);
  sums_at_ = h.sums_offset;
  pread_all(fd, sums_.data(), n * 4, h.sums_offset, path_);
  if (crc32c(0, sums_.data(), n * 4) != h.sums_crc)
    throw data_error(path_ + ": the sums section (bytes [" + std::to_string(h.sums_offset) + ", " +
                std::to_string(h.sums_offset + n * 4) + ")) does not match its checksum: a corrupt column file");
  uint64_t first = 0;
  for (column_info& c : cols_) {
    c.first_sum = first;
    first += section_sum_count(c.bytes);
  }
}

std::vector<uint32_t> column_file::column_sums(const column_info& c) const {
  if (!checksummed()) return {};
  return sums_slice(sums_, c.first_sum, section_sum_count(c.bytes));
}

bool column_file::verify(const std::string& name, unsigned threads) const {
  if (!checksummed()) return false;
  if (!name.empty()) column(name);  // a missing column named as such
  uint64_t end = 0;
  for (const column_info& c : cols_) end = std::max(end, c.offset + c.bytes);
  const file_mapping m(path_, end);
  for (const column_info& c : cols_)
    if (name.empty() || c.name == name)
      try {
        verify_section(path_, "column '" + c.name + "'", c.offset, m.p + c.offset, c.bytes,
                       sums_.data() + c.first_sum, threads);
      } catch (const error&) {
        m.check_whole(path_);  // zeros where the file was: say so, not "corrupt"
        throw;
      }
  m.check_whole(path_);
  return true;
}

const column_info& column_file::column(const std::string& name) const {
  for (const column_info& c : cols_)
    if (c.name == name) return c;
  std::string have;
  for (const column_info& c : cols_) have += (have.empty() ? "" : ", ") + c.name;
  throw error(path_ + ": no column '" + name + "' (columns: " + have + ")");
}

const column_info& column_file::column(const std::string& name, column_type want) const {
  const column_info& c = column(name);
  if (c.type != want)
    throw error(path_ + ": column '" + name + "' is " + type_name(c.type) + ", the query needs " + type_name(want));
  return c;
}

std::vector<std::pair<int64_t, int64_t>> column_file::stats(const std::string& name) const {
  const column_info& c = column(name);
  if (!c.has_stats) throw error(path_ + ": column '" + name + "' has no statistics");
  const std::vector<int64_t>& raw = stats_[size_t(&c - cols_.data())];
  std::vector<std::pair<int64_t, int64_t>> out(raw.size() / 2);
  for (uint64_t g = 0; g < out.size(); ++g) out[g] = {raw[2 * g], raw[2 * g + 1]};
  return out;
}

// ---- writing ----

struct column_file_writer::stats_state {
  std::mutex m;
  std::vector<std::vector<int64_t>> minmax;  // per column: groups x (min, max)
};

column_file_writer::column_file_writer(const std::string& path, uint64_t rows, std::vector<column_spec> cols,
                                       uint64_t row_group_rows)
    : path_(path), rows_(rows), row_group_rows_(row_group_rows) {
  if (cols.empty()) throw error(path + ": a column file needs at least one column");
  std::set<std::string> names;
  for (const column_spec& c : cols) {
    if (c.name.empty() || c.name.size() >= column_name_bytes)
      throw error(path + ": column name '" + c.name + "' must be 1 to " + std::to_string(column_name_bytes - 1) + " bytes");
    if (!names.insert(c.name).second) throw error(path + ": column '" + c.name + "' declared twice");
    if (type_width(c.type) == 0) throw error(path + ": column '" + c.name + "' has an unknown type");
  }
  header_bytes_ = round_up(sizeof(column_file_header) + cols.size() * sizeof(column_desc), column_align);
  uint64_t at = header_bytes_;
  const uint64_t groups = row_group_rows_ ? row_groups(rows_, row_group_rows_) : 0;
  // Every offset below checked against 64 bits (rows from a negative
  // number on a command line wrap to nearly 2^64).
  const auto too_big = [&] {
    return error(path + ": " + std::to_string(rows_) + " rows of these columns take more than 2^64 bytes");
  };
  for (const column_spec& c : cols) {
    const uint32_t w = type_width(c.type);
    uint64_t bytes = 0, end = 0;
    if (__builtin_mul_overflow(rows_, uint64_t(w), &bytes) || __builtin_add_overflow(at, bytes, &end) ||
        end > UINT64_MAX - column_align)
      throw too_big();
    cols_.push_back({c.name, c.type, w, c.scale, at, bytes, false, 0, 0});
    at = round_up(end, column_align);
  }
  uint64_t first = 0;
  for (column_info& c : cols_) {
    c.first_sum = first;
    first += section_sum_count(c.bytes);
  }
  for (column_info& c : cols_)
    if (groups && type_is_integer(c.type)) {
      c.has_stats = true;
      c.stats_offset = at;
      if (groups > (UINT64_MAX - at) / 16) throw too_big();
      at += groups * 16;
    }
  sums_offset_ = round_up(at, column_align);
  if (total_sums(cols_) > (UINT64_MAX - column_align - sums_offset_) / 4) throw too_big();
  file_bytes_ = round_up(sums_offset_ + total_sums(cols_) * 4, column_align);
  detail::check_output_path(path);
  tmp_ = path + ".partial";
  detail::check_output_path(tmp_);
  fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ < 0) throw error(errno_message("create column file " + tmp_, errno));
  struct stat opened {};
  if (::fstat(fd_, &opened) != 0 || !S_ISREG(opened.st_mode)) {  // a link to a device or FIFO
    ::close(fd_);
    fd_ = -1;
    throw error(tmp_ + ": not a regular file (a link to a device or FIFO?): not written");
  }
  if (ftruncate(fd_, off_t(file_bytes_)) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw error(errno_message("size column file " + tmp_, e));
  }
  stats_ = std::make_unique<stats_state>();
  auto* s = stats_.get();
  s->minmax.resize(cols_.size());
  for (size_t i = 0; i < cols_.size(); ++i)
    if (cols_[i].has_stats)
      for (uint64_t g = 0; g < groups; ++g) {
        s->minmax[i].push_back(std::numeric_limits<int64_t>::max());
        s->minmax[i].push_back(std::numeric_limits<int64_t>::min());
      }
}

column_file_writer::~column_file_writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !tmp_.empty()) ::unlink(tmp_.c_str());  // a failed write leaves what was under path_
}

void column_file_writer::write(uint32_t col, uint64_t first_row, uint64_t n, const void* values) {
  if (col >= cols_.size()) throw error(path_ + ": column index " + std::to_string(col) + " out of range");
  const column_info& c = cols_[col];
  if (first_row > rows_ || n > rows_ - first_row)
    throw error(path_ + ": column '" + c.name + "': rows [" + std::to_string(first_row) + ", " +
                std::to_string(first_row + n) + ") past " + std::to_string(rows_) + " rows");
  pwrite_all(fd_, values, n * c.width, c.offset + first_row * c.width, path_);
  if (!c.has_stats) return;
  stats_state& s = *stats_;
  const auto* p = static_cast<const uint8_t*>(values);
  for (uint64_t r = first_row; r < first_row + n;) {
    const uint64_t g = r / row_group_rows_, end = std::min(first_row + n, (g + 1) * row_group_rows_);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    min_max(c.type, p + (r - first_row) * c.width, end - r, lo, hi);
    {
      std::lock_guard<std::mutex> l(s.m);
      s.minmax[col][2 * g] = std::min(s.minmax[col][2 * g], lo);
      s.minmax[col][2 * g + 1] = std::max(s.minmax[col][2 * g + 1], hi);
    }
    r = end;
  }
}

void column_file_writer::finish() {
  column_file_header h{};
  std::memcpy(h.magic, column_file_magic, sizeof h.magic);
  h.version = column_file_version;
  h.ncols = uint32_t(cols_.size());
  h.rows = rows_;
  h.row_group_rows = row_group_rows_;
  h.header_bytes = header_bytes_;
  h.file_bytes = file_bytes_;
  h.sums_offset = sums_offset_;
  std::vector<uint8_t> head(header_bytes_, 0);
  for (size_t i = 0; i < cols_.size(); ++i) {
    const column_info& c = cols_[i];
    column_desc d{};
    std::memcpy(d.name, c.name.data(), c.name.size());
    d.type = uint8_t(c.type);
    d.width = uint8_t(c.width);
    d.scale = int8_t(c.scale);
    d.has_stats = c.has_stats;
    d.offset = c.offset;
    d.bytes = c.bytes;
    d.stats_offset = c.stats_offset;
    std::memcpy(head.data() + sizeof h + i * sizeof d, &d, sizeof d);
  }
  stats_state& s = *stats_;
  for (size_t i = 0; i < cols_.size(); ++i)
    if (cols_[i].has_stats) pwrite_all(fd_, s.minmax[i].data(), s.minmax[i].size() * 8, cols_[i].stats_offset, path_);
  // The sums of what the columns' writes left in the file (read back
  // through a mapping: the columns came in blocks, in any order).
  std::vector<uint32_t> sums(total_sums(cols_));
  {
    const file_mapping m(tmp_, sums_offset_);
    for (const column_info& c : cols_) section_sums(m.p + c.offset, c.bytes, sums.data() + c.first_sum);
    m.check_whole(tmp_);
  }
  pwrite_all(fd_, sums.data(), sums.size() * 4, sums_offset_, path_);
  h.sums_crc = crc32c(0, sums.data(), sums.size() * 4);
  std::vector<std::vector<int64_t>> stats(cols_.size());
  for (size_t i = 0; i < cols_.size(); ++i)
    if (cols_[i].has_stats) stats[i] = s.minmax[i];
  h.header_crc = header_crc(h, head.data() + sizeof h, cols_.size() * sizeof(column_desc), stats);
  std::memcpy(head.data(), &h, sizeof h);
  // The header last: a file whose writer died before this point has no magic.
  if (fsync(fd_) != 0) throw error(errno_message("fsync " + path_, errno));
  pwrite_all(fd_, head.data(), head.size(), 0, path_);
  if (fsync(fd_) != 0) throw error(errno_message("fsync " + path_, errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw error(errno_message("rename " + tmp_ + " to " + path_, errno));
  finished_ = true;
}

}  // namespace deepwell::table
