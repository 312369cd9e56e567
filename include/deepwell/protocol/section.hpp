// A section: a byte range of a dataset served as a namespace of its own (a
// graph or column file's section, a store's region), optionally checked
// block by block against CRC-32C sums kept in the same dataset. A client
// asks its link for one (controller_link::open_section); the controller's
// side builds it over the dataset's target, so that a server checks the
// range against the client's grant and reads the sums itself.
#pragma once
#include <cstdint>

namespace deepwell {

enum class sums_kind : uint8_t {
  none = 0,
  // Read-only data whose sums were written with the file (graph and column
  // files, file_sums.hpp): 4 KiB blocks, sums_bytes >= 4 per block.
  fixed = 1,
  // Sums written with the data and flushed with it (a store's table,
  // checksummed_target.hpp): sums_bytes >= checksum_region_bytes(bytes, sum_block).
  kept = 2,
};

struct section_request {
  uint32_t dataset = 0;       // the namespace (of the same link) it is part of
  uint64_t offset = 0;        // in the dataset; a multiple of the dataset's direct-I/O alignment
  uint64_t bytes = 0;
  uint32_t block_size = 4096;  // the section's namespace: a power of two, 512 to 65536
  bool writable = false;       // needs the write right on the dataset
  sums_kind sums = sums_kind::none;
  uint64_t sums_offset = 0;  // in the dataset, outside [offset, offset + bytes)
  uint64_t sums_bytes = 0;
  uint32_t sum_block = 4096;  // bytes one sum covers (kept: a power of two, 512 to 1 MiB)
};

// What a checked section's reads met: blocks that did not match their sums.
struct section_checks {
  uint64_t mismatches = 0;
  uint64_t last_bad_block = 0;  // of the section, in sum_block units
};

}  // namespace deepwell
