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
  host_mapping() = default;
  host_mapping(const host_mapping&) = delete;
  host_mapping& operator=(const host_mapping&) = delete;
  ~host_mapping();
};

}  // namespace deepwell
