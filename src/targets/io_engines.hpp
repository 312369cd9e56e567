// The concrete io_engine implementations, for the factory in engine.cpp
// (and tests that want one backend in particular go through make_io_engine).
#pragma once
#include <memory>

#include "deepwell/targets/io_engine.hpp"

namespace deepwell::detail {

// Throws deepwell::error when the ring cannot be set up.
std::unique_ptr<io_engine> make_uring_engine(unsigned queue_depth);

// `threads` worker threads doing preadv2/pwritev2/fdatasync.
std::unique_ptr<io_engine> make_thread_engine(unsigned queue_depth, unsigned threads = 4);

// The buffers an engine has registered now, for targets that drive rings of
// their own (NVMe passthrough) and register the same memory there.
// `generation` changes whenever the registration does and is never reused
// by any engine of the process, so a ring that registered generation g may
// use its registration for exactly as long as the engine still reports g.
// Only the io_uring engine registers; others report none (generation 0).
struct buffer_registration {
  const iovec* iov = nullptr;
  unsigned n = 0;
  uint64_t generation = 0;
};
buffer_registration registered_buffers(const io_engine& e);

// Largest file offset that can be passed on: -1 (all ones) would mean "the
// current file position" to both preadv2 and io_uring.
inline constexpr unsigned long long max_io_offset = 0x7fffffffffffffffULL;

}  // namespace deepwell::detail
