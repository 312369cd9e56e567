// Arrays of drives through the C ABI (dw_array_options.members, layout,
// chunk_bytes): a stripe's rows land chunk by chunk on its member files and
// a mirror's on every member, both read back after a reopen; the route says
// what the dataset is; bad input is refused with a message naming the
// problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "../common/scratch_file.hpp"
#include "deepwell/c/deepwell.h"

namespace {

constexpr uint32_t row_bytes = 64;

struct files {
  std::vector<std::unique_ptr<deepwell::test::scratch_file>> f;
  std::vector<const char*> paths;
  explicit files(unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      f.push_back(std::make_unique<deepwell::test::scratch_file>());
      ::unlink(f.back()->path().c_str());  // made by the open (create)
      paths.push_back(f.back()->path().c_str());
    }
  }
  std::vector<uint8_t> read(unsigned m) const {
    std::vector<uint8_t> out;
    const int fd = ::open(paths[m], O_RDONLY);
    if (fd < 0) return out;
    out.resize(size_t(lseek(fd, 0, SEEK_END)));
    if (pread(fd, out.data(), out.size(), 0) != ssize_t(out.size())) out.clear();
    ::close(fd);
    return out;
  }
};

dw_array_options array_of(const files& fs, int32_t layout, uint64_t rows, uint64_t chunk) {
  dw_array_options o;
  dw_array_options_init(&o);
  o.members = const_cast<const char**>(fs.paths.data());
  o.member_count = uint32_t(fs.paths.size());
  o.layout = layout;
  o.chunk_bytes = chunk;
  o.row_bytes = row_bytes;
  o.writable = 1;
  o.create = rows != 0;
  o.create_bytes = rows * row_bytes;
  o.cache.cache_bytes = 256 << 10;  // a fraction of the rows: scatters are written back as they go
  return o;
}

uint8_t row_byte(uint64_t row, uint32_t k) { return uint8_t(row * 31 + k * 7 + 1); }

// Writes every row, closes; opens again (the files exist now) and gathers
// them all back; returns the open array's route.
std::string write_and_read_back(const files& fs, int32_t layout, uint64_t rows, uint64_t chunk) {
  std::vector<int64_t> idx(rows);
  std::vector<uint8_t> data(rows * row_bytes), back(rows * row_bytes);
  for (uint64_t r = 0; r < rows; ++r) {
    idx[r] = int64_t((r * 7919) % rows);  // scattered order
    for (uint32_t k = 0; k < row_bytes; ++k) data[r * row_bytes + k] = row_byte(uint64_t(idx[r]), k);
  }
  dw_array_options o = array_of(fs, layout, rows, chunk);
  dw_array* a = nullptr;
  EXPECT_EQ(dw_array_open(&o, &a), DW_OK) << dw_last_error();
  if (!a) return {};
  EXPECT_EQ(dw_array_scatter(a, idx.data(), 64, 1, rows, data.data(), 0), DW_OK) << dw_last_error();
  EXPECT_EQ(dw_array_close(a), DW_OK) << dw_last_error();

  o = array_of(fs, layout, 0, chunk);
  EXPECT_EQ(dw_array_open(&o, &a), DW_OK) << dw_last_error();
  if (!a) return {};
  dw_array_info info;
  EXPECT_EQ(dw_array_info_get(a, &info), DW_OK);
  EXPECT_EQ(info.rows, rows);
  EXPECT_EQ(dw_array_gather(a, idx.data(), 64, 1, rows, back.data(), 0), DW_OK) << dw_last_error();
  EXPECT_EQ(back, data);
  EXPECT_EQ(dw_array_close(a), DW_OK);
  return info.route;
}

std::string refusal(const dw_array_options& o, int want = DW_EINVAL) {
  dw_array* a = nullptr;
  const int rc = dw_array_open(&o, &a);
  if (a) dw_array_close(a);
  EXPECT_EQ(rc, want) << dw_last_error();
  return dw_last_error();
}

}  // namespace

TEST(CDriveArrays, AStripesRowsLandChunkByChunkOnItsMembers) {
  const uint64_t rows = 3 * 4096, chunk = 4096;  // 768 KiB over 3 members: 64 chunks each
  files fs(3);
  const std::string route = write_and_read_back(fs, DW_LAYOUT_STRIPE, rows, chunk);
  EXPECT_NE(route.find("stripe of 3"), std::string::npos) << route;
  // Row r's bytes sit in chunk c = r * row_bytes / chunk, on member c % 3.
  std::vector<std::vector<uint8_t>> m = {fs.read(0), fs.read(1), fs.read(2)};
  for (unsigned i = 0; i < 3; ++i) ASSERT_EQ(m[i].size(), rows * row_bytes / 3) << "member " << i;
  uint64_t wrong = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t b = r * row_bytes, c = b / chunk;
    const uint8_t* at = m[c % 3].data() + (c / 3) * chunk + b % chunk;
    for (uint32_t k = 0; k < row_bytes; ++k) wrong += at[k] != row_byte(r, k);
  }
  EXPECT_EQ(wrong, 0u);
}

TEST(CDriveArrays, AMirrorsRowsLandOnEveryMember) {
  const uint64_t rows = 8192;
  files fs(2);
  const std::string route = write_and_read_back(fs, DW_LAYOUT_MIRROR, rows, 0);
  EXPECT_NE(route.find("mirror of 2"), std::string::npos) << route;
  for (unsigned i = 0; i < 2; ++i) {
    const std::vector<uint8_t> m = fs.read(i);
    ASSERT_EQ(m.size(), rows * row_bytes) << "member " << i;
    uint64_t wrong = 0;
    for (uint64_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < row_bytes; ++k) wrong += m[r * row_bytes + k] != row_byte(r, k);
    EXPECT_EQ(wrong, 0u) << "member " << i;
  }
}

TEST(CDriveArrays, BadArraysAreRefusedNamingTheProblem) {
  files fs(2);
  dw_array_options o = array_of(fs, DW_LAYOUT_STRIPE, 1024, 4096);
  o.member_count = 0;
  EXPECT_NE(refusal(o).find("no members"), std::string::npos);
  o = array_of(fs, DW_LAYOUT_MIRROR, 1024, 0);
  o.members = nullptr;
  EXPECT_NE(refusal(o).find("no members"), std::string::npos);
  o = array_of(fs, DW_LAYOUT_STRIPE, 1024, 3000);
  EXPECT_NE(refusal(o).find("power of two"), std::string::npos);
  o = array_of(fs, DW_LAYOUT_MIRROR, 1024, 4096);
  EXPECT_NE(refusal(o).find("stripe only"), std::string::npos);
  o = array_of(fs, 7, 1024, 0);
  EXPECT_NE(refusal(o).find("layout 7"), std::string::npos);
  o = array_of(fs, DW_LAYOUT_SINGLE, 1024, 0);
  EXPECT_NE(refusal(o).find("DW_LAYOUT_SINGLE"), std::string::npos);
  o = array_of(fs, DW_LAYOUT_MIRROR, 1024, 0);
  o.path = fs.paths[0];
  EXPECT_NE(refusal(o).find("path must be NULL"), std::string::npos);
  const char* holes[] = {fs.paths[0], ""};
  o = array_of(fs, DW_LAYOUT_MIRROR, 1024, 0);
  o.members = holes;
  EXPECT_NE(refusal(o).find("member 1 of the mirror has no path"), std::string::npos);

  // A member missing (no create): DW_EIO naming it.
  o = array_of(fs, DW_LAYOUT_STRIPE, 0, 4096);
  EXPECT_NE(refusal(o, DW_EIO).find(std::string("member 0 of the stripe: ") + "open " + fs.paths[0]),
            std::string::npos)
      << dw_last_error();

  // Members of different sizes.
  for (unsigned i = 0; i < 2; ++i) {
    const int fd = ::open(fs.paths[i], O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, (i + 1) << 20), 0);
    ::close(fd);
  }
  o = array_of(fs, DW_LAYOUT_MIRROR, 0, 0);
  const std::string sizes = refusal(o);
  EXPECT_NE(sizes.find("differ in size"), std::string::npos) << sizes;
  EXPECT_NE(sizes.find(fs.paths[1]), std::string::npos) << sizes;
}
