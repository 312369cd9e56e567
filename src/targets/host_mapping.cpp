#include <sys/mman.h>

#include "deepwell/target.hpp"

namespace deepwell {

host_mapping::~host_mapping() {
  if (base && !owner) ::munmap(base, base_bytes);
}

}  // namespace deepwell
