#include "direct_map.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace deepwell::detail {

std::optional<direct_map> direct_map::make(page_cache& cache, int fd, uint64_t size, bool need_resident) {
  if (size == 0) return std::nullopt;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  direct_map m;
  m.length = (size + page - 1) / page * page;
  m.file_bytes = size;
  void* p = ::mmap(nullptr, m.length, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return std::nullopt;
  m.base = p;
  if (need_resident) {
    std::vector<unsigned char> in(m.length / page);
    bool all = ::mincore(p, m.length, in.data()) == 0;
    for (size_t i = 0; all && i < in.size(); ++i) all = in[i] & 1;
    if (!all) {
      ::munmap(p, m.length);
      return std::nullopt;
    }
  }
  m.client = cache.share_host(p, m.length, true);
  if (!m.client) {
    ::munmap(p, m.length);
    return std::nullopt;
  }
  return m;
}

void direct_map::release(page_cache& cache) {
  if (!base) return;
  cache.unshare_host(base);
  ::munmap(base, length);
  base = nullptr;
  client = nullptr;
}

}  // namespace deepwell::detail
