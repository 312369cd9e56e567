// flush() in key order (internal to the GPU cache): the dirty slots' keys
// sorted on the GPU, then written back by warps that each take a run of 32
// and send all of it through one queue, so that a poller receives adjacent
// pages of a file together and writes them with one call (a page-cache
// file's merged writes, docs/architecture.md). Written back in slot order,
// as before, a flush of a file's pages reached the poller scattered: one
// write call per 4 KiB page, serialized on the file's inode lock.
#pragma once
#include <cuda_runtime.h>

#include "deepwell/cache/page_cache_ref.hpp"

namespace deepwell::detail {

// Writes back every slot found dirty, in key order, on `stream`, and waits.
// Best effort, ahead of flush()'s slot-order pass: a page whose write fails
// stays dirty and that pass writes it again and reports it; where the
// scratch memory cannot be had, nothing is written here.
void flush_in_key_order(const page_cache_ref& c, cudaStream_t stream);

}  // namespace deepwell::detail
