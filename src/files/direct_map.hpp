// A read-only file's direct tier for the file API: a PROT_READ, MAP_SHARED
// mapping of the whole file, shared with the cache's clients (registered
// and mapped for a GPU), which a warp that misses a page of the file copies
// from with no controller round trip (dataset_desc::windows).
#pragma once
#include <cstdint>
#include <optional>

#include "deepwell/page_cache.hpp"

namespace deepwell::detail {

struct direct_map {
  void* base = nullptr;            // the mapping
  uint64_t length = 0;             // its bytes (the file's, rounded up to a page)
  const uint8_t* client = nullptr; // the mapping as the clients address it
  uint64_t file_bytes = 0;         // the file's size when mapped

  // Maps `size` bytes of fd and shares them with the cache's clients; none
  // if the file is empty, the mapping or sharing fails, or (need_resident)
  // some page is not in the page cache (sharing would read it from disk).
  static std::optional<direct_map> make(page_cache& cache, int fd, uint64_t size, bool need_resident);
  // Unshares (for a GPU: waits for running kernels) and unmaps.
  void release(page_cache& cache);
};

}  // namespace deepwell::detail
