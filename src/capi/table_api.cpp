// The C ABI's checksums of read-only files (include/deepwell/c/deepwell.h):
// what Python's column-file writer and reader need, the same code as the
// C++ writers and readers (file_sums.hpp, column_file.hpp).
#include "deepwell/common/crc32c.hpp"
#include "deepwell/table/column_file.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "guarded.hpp"

using namespace deepwell;
using deepwell::capi::guarded;
using deepwell::capi::need;

extern "C" {

int dw_crc32c(uint32_t crc, const void* data, uint64_t bytes, uint32_t* out) {
  return guarded([&] {
    need(out && (data || bytes == 0), "dw_crc32c: no data or no out");
    *out = crc32c(crc, data, bytes);
  });
}

int dw_section_sums(const void* data, uint64_t bytes, uint32_t* out) {
  return guarded([&] {
    need((data && out) || bytes == 0, "dw_section_sums: no data or no out");
    section_sums(data, bytes, out);
  });
}

int dw_column_file_verify(const char* path, const char* column, uint32_t threads, int32_t* checked) {
  return guarded([&] {
    need(path != nullptr, "dw_column_file_verify: no path");
    const table::column_file f = table::column_file::open(path);
    const bool done = f.verify(column ? column : "", threads);
    if (checked) *checked = done ? 1 : 0;
  });
}

}  // extern "C"
