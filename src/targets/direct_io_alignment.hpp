// The alignment O_DIRECT needs for one open file: file offsets and lengths
// (offset), and buffer addresses (memory).
#pragma once
#include <cstdint>

namespace deepwell::detail {

struct direct_io_alignment {
  uint32_t offset = 512;
  uint32_t memory = 512;
};

// From statx(STATX_DIOALIGN) (Linux 6.1+); where the kernel or the file
// system does not say, the device's logical block size (block devices) or
// 512, which every direct-I/O capable Linux file system accepts.
direct_io_alignment direct_io_alignment_of(int fd, bool block_device);

}  // namespace deepwell::detail
