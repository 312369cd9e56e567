#include "direct_map.hpp"
#include "deepwell/common/defaults.hpp"

namespace deepwell::detail {

std::optional<direct_map> direct_map::make(page_cache& cache, int fd, uint64_t size, bool need_resident) {
  direct_map m;
  m.map = map_file_readonly(fd, 0, size);
  if (!m.map || (need_resident && m.map->resident < defaults::builtin::direct_resident_share)) return std::nullopt;
  m.client = cache.share_host(m.map->base, m.map->base_bytes, true);
  if (!m.client) return std::nullopt;
  m.file_bytes = size;
  return m;
}

void direct_map::release(page_cache& cache) {
  if (!map) return;
  cache.unshare_host(map->base);
  map.reset();
  client = nullptr;
}

}  // namespace deepwell::detail
