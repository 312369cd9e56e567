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

// Largest file offset that can be passed on: -1 (all ones) would mean "the
// current file position" to both preadv2 and io_uring.
inline constexpr unsigned long long max_io_offset = 0x7fffffffffffffffULL;

}  // namespace deepwell::detail
