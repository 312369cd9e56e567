#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "deepwell/common/host_mapping.hpp"
#include "mapping_guard.hpp"

namespace deepwell {

host_mapping::~host_mapping() {
  detail::unguard_mapping(guard);
  if (base && !owner) ::munmap(base, base_bytes);
}

bool host_mapping::cut() const { return detail::mapping_cut(guard); }

std::shared_ptr<host_mapping> map_file_readonly(int fd, uint64_t offset, uint64_t size) {
  if (size == 0) return nullptr;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const uint64_t len = offset - start + size;
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off_t(start));
  if (p == MAP_FAILED) return nullptr;
  auto m = std::make_shared<host_mapping>();
  m->file = true;
  m->base = p;
  m->base_bytes = (len + page - 1) / page * page;
  m->data = static_cast<const uint8_t*>(p) + (offset - start);
  m->bytes = size;
  m->resident = resident_share(p, len);
  m->guard = detail::guard_mapping(p, m->base_bytes);
  return m;
}

double resident_share(const void* p, uint64_t len) {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((len + page - 1) / page);
  if (v.empty() || ::mincore(const_cast<void*>(p), len, v.data()) != 0) return 0;
  uint64_t in = 0;
  for (unsigned char c : v) in += c & 1;
  return double(in) / double(v.size());
}

}  // namespace deepwell
