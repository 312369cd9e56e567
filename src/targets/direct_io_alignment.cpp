// statx(STATX_DIOALIGN), readable even where the C library's headers
// predate it.
#include "direct_io_alignment.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstring>

namespace deepwell::detail {
namespace {

// Where struct statx keeps stx_dio_mem_align and stx_dio_offset_align (the
// kernel's layout, fixed since Linux 6.1). Older headers have padding there,
// so the fields are read by offset rather than by name.
constexpr size_t dio_mem_align_at = 152;
constexpr size_t dio_offset_align_at = 156;
constexpr unsigned statx_dioalign_bit = 0x2000;  // STATX_DIOALIGN

#ifdef STATX_DIOALIGN
static_assert(STATX_DIOALIGN == statx_dioalign_bit);
static_assert(offsetof(struct statx, stx_dio_mem_align) == dio_mem_align_at);
static_assert(offsetof(struct statx, stx_dio_offset_align) == dio_offset_align_at);
#endif
static_assert(sizeof(struct statx) >= dio_offset_align_at + sizeof(uint32_t));

uint32_t field_at(const struct statx& stx, size_t at) {
  uint32_t v;
  std::memcpy(&v, reinterpret_cast<const char*>(&stx) + at, sizeof v);
  return v;
}

uint32_t logical_block_size(int fd, bool block_device) {
  int bytes = 0;
  if (block_device && ioctl(fd, BLKSSZGET, &bytes) == 0 && bytes > 0) return static_cast<uint32_t>(bytes);
  return 512;
}

}  // namespace

direct_io_alignment direct_io_alignment_of(int fd, bool block_device) {
  struct statx stx;
  std::memset(&stx, 0, sizeof stx);
  if (statx(fd, "", AT_EMPTY_PATH, statx_dioalign_bit, &stx) == 0 && (stx.stx_mask & statx_dioalign_bit)) {
    uint32_t mem = field_at(stx, dio_mem_align_at);
    uint32_t off = field_at(stx, dio_offset_align_at);
    if (mem != 0 && off != 0) return {off, mem};
  }
  uint32_t block = logical_block_size(fd, block_device);
  return {block, block};
}

}  // namespace deepwell::detail
