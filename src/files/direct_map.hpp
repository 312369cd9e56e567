// A read-only file's direct tier for the file API: the file's read-only
// mapping (map_file_readonly), shared with the cache's clients (registered
// and mapped for a GPU), which a warp that misses a page of the file copies
// from with no controller round trip (dataset_desc::windows).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/host_mapping.hpp"

namespace deepwell::detail {

struct direct_map {
  std::shared_ptr<host_mapping> map;  // unmapped when the last copy goes, after release()
  const uint8_t* client = nullptr;    // the mapping as the clients address it
  uint64_t file_bytes = 0;            // the file's size when mapped

  // Maps `size` bytes of fd and shares them with the cache's clients; none
  // if the file is empty, the mapping or sharing fails, or (need_resident)
  // some page is not in the page cache (sharing would read it from disk).
  static std::optional<direct_map> make(page_cache& cache, int fd, uint64_t size, bool need_resident);
  // Unshares (for a GPU: waits for running kernels) and lets the mapping go.
  void release(page_cache& cache);
};

}  // namespace deepwell::detail
