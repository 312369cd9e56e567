// Writes to page-cache files run on the calling thread (a poller), a pass's
// writes together: a buffered write is a copy into the page cache, cheaper
// than handing it to a thread (a wake-up, and a completion the poller sees
// only at its next look). Where `merge`, writes to one file at adjacent
// offsets go in one pwritev2, in offset order; writes of a batch that
// overlap keep the order they were queued in (then nothing is reordered or
// merged), so a later write to the same bytes still lands last.
#pragma once
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "deepwell/targets/io_engine.hpp"

namespace deepwell::detail {

class buffered_writes {
 public:
  // The slowest write call of a batch: a file whose writes block (the
  // kernel throttling dirty pages) should not stall the poller.
  struct slowest {
    int fd = -1;
    uint64_t ns = 0;
  };

  // Runs ops[i] (writes), storing each one's bytes or -errno in results[i].
  slowest run(io_op* const* ops, int64_t* results, size_t n, bool merge);

 private:
  std::vector<uint32_t> order_;
  std::vector<iovec> iov_;
};

}  // namespace deepwell::detail
