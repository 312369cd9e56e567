/* deepwell's C ABI, every part (conventions: base.h). Built as libdeepwell_c.so
 * (CMake target deepwell_c; its symbols: src/capi/deepwell_c.map); the Python
 * package loads it with ctypes. One reference page per function: docs/c/. */
#ifndef DEEPWELL_C_DEEPWELL_H
#define DEEPWELL_C_DEEPWELL_H

#include "deepwell/c/base.h"
#include "deepwell/c/array.h"
#include "deepwell/c/checksums.h"
#include "deepwell/c/checkpoint.h"
#include "deepwell/c/kv.h"
#include "deepwell/c/vectors.h"

#endif /* DEEPWELL_C_DEEPWELL_H */
