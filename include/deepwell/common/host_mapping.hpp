// A view of a dataset's bytes in host memory: the direct tier, which
// readers use without a controller round trip. Either a MAP_SHARED,
// PROT_READ mapping of a file (its page cache), unmapped when the last
// reference goes, or the memory of a host-memory dataset, which the view
// keeps alive (`owner`) and does not unmap.
#pragma once
#include <cstdint>
#include <memory>

namespace deepwell {

struct host_mapping {
  const uint8_t* data = nullptr;  // dataset byte 0
  uint64_t bytes = 0;
  void* base = nullptr;           // [base, base + base_bytes): the whole page-aligned view (what a GPU registers)
  uint64_t base_bytes = 0;
  double resident = 0;            // share of its pages in memory when it was made (mincore; 1 for memory)
  bool file = false;              // a read-only mapping of a file (else: the memory of a host-memory dataset)
  bool writable = false;          // the memory of a writable dataset (a file mapping never is)
  std::shared_ptr<const void> owner;  // set: the memory belongs to it (not unmapped here)
  int guard = -1;                     // a file mapping's guard against the file being cut short
  // Whether a read found the file cut short under the mapping (truncated):
  // the pages past its new end read as zeros from then on.
  bool cut() const;
  host_mapping() = default;
  host_mapping(const host_mapping&) = delete;
  host_mapping& operator=(const host_mapping&) = delete;
  ~host_mapping();
};

// A PROT_READ, MAP_SHARED mapping of `size` bytes of file `fd` from byte
// `offset` (any alignment: the view starts at the page below), with its
// residency; nullptr if size is 0 or mmap fails.
std::shared_ptr<host_mapping> map_file_readonly(int fd, uint64_t offset, uint64_t size);
// The share of the pages of [p, p + len) in memory (mincore); 0 if it fails.
double resident_share(const void* p, uint64_t len);

}  // namespace deepwell
