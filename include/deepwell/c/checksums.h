/* deepwell's C ABI: the checksums of read-only files. */
#ifndef DEEPWELL_C_CHECKSUMS_H
#define DEEPWELL_C_CHECKSUMS_H

#include "deepwell/c/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checksums of read-only files (column files and .dwg graphs, format
 * version 2; include/deepwell/targets/file_sums.hpp). dw_crc32c: *out = the CRC-32C
 * of `bytes` bytes continuing `crc` (0 to start). dw_section_sums: the
 * stored sums of a section of `bytes` bytes, one a 4 KiB block (the last
 * one completed with zeros), (bytes + 4095) / 4096 of them to out. */
DW_API int dw_crc32c(uint32_t crc, const void* data, uint64_t bytes, uint32_t* out);
DW_API int dw_section_sums(const void* data, uint64_t bytes, uint32_t* out);
/* Opens the column file at `path` (its header, descriptors, statistics and
 * sums checked) and checks every block of the named column (NULL or "":
 * every column) on `threads` threads (0: every core). DW_EIO naming the
 * file, the column and the bytes of the first bad block; *checked (may be
 * NULL) = 0 for a version-1 file, which has no sums. Python: deepwell.table. */
DW_API int dw_column_file_verify(const char* path, const char* column, uint32_t threads, int32_t* checked);

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_CHECKSUMS_H */
