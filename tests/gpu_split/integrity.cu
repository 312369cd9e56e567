// The standing integrity test (random reads and writes under eviction,
// flush, POSIX re-read, re-read after clear), its source as is, built with
// the miss path from deepwell_miss_path: the header comes first, before the
// test's kernels instantiate anything.
#include "deepwell/cache/miss_path.hpp"

#include "../gpu/test_gpu_integrity.cu"
