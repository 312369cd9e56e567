#include "targets/buffered_writes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "deepwell/protocol/shared_atomic.hpp"
#include "targets/io_engines.hpp"

namespace deepwell::detail {
namespace {

// A merged write's largest size: big enough that a run of adjacent pages is
// one call, small enough that one call does not hold the file's lock long.
constexpr uint64_t max_merged_bytes = 1u << 20;

int64_t write_vector(int fd, const iovec* iov, int n, uint64_t offset, int flags) {
  ssize_t r;
  do r = pwritev2(fd, iov, n, off_t(offset), flags);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

}  // namespace

buffered_writes::slowest buffered_writes::run(io_op* const* ops, int64_t* results, size_t n, bool merge) {
  slowest worst;
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = uint32_t(i);
  auto by_place = [&](uint32_t a, uint32_t b) {
    return ops[a]->fd != ops[b]->fd ? ops[a]->fd < ops[b]->fd : ops[a]->offset < ops[b]->offset;
  };
  if (merge && n > 1) {
    std::stable_sort(order_.begin(), order_.end(), by_place);
    // Sorted by start, no two writes overlap if no neighbours do.
    for (size_t k = 1; k < n; ++k) {
      const io_op& a = *ops[order_[k - 1]];
      const io_op& b = *ops[order_[k]];
      if (a.fd == b.fd && b.offset < a.offset + a.len) {
        for (size_t i = 0; i < n; ++i) order_[i] = uint32_t(i);
        merge = false;
        break;
      }
    }
  }
  for (size_t k = 0; k < n;) {
    const io_op& first = *ops[order_[k]];
    size_t end = k + 1;
    uint64_t bytes = first.len;
    if (merge)
      while (end < n && end - k < IOV_MAX) {
        const io_op& next = *ops[order_[end]];
        if (next.fd != first.fd || next.rw_flags != first.rw_flags || next.offset != first.offset + bytes ||
            bytes + next.len > max_merged_bytes)
          break;
        bytes += next.len;
        ++end;
      }
    iov_.resize(end - k);
    for (size_t j = k; j < end; ++j) iov_[j - k] = {ops[order_[j]]->buf, ops[order_[j]]->len};
    const uint64_t t0 = now_ns();
    int64_t r = first.offset > max_io_offset ? -EINVAL
                                             : write_vector(first.fd, iov_.data(), int(end - k), first.offset,
                                                            first.rw_flags);
    const uint64_t took = now_ns() - t0;
    if (took > worst.ns) worst = {first.fd, took};
    if (end - k == 1) {
      results[order_[k]] = r;
    } else if (r == int64_t(bytes)) {
      for (size_t j = k; j < end; ++j) results[order_[j]] = ops[order_[j]]->len;
    } else {
      // A merged write failed or fell short: each again on its own, so each
      // gets its own answer (the ranges do not overlap, so writing a range
      // twice leaves the same bytes).
      for (size_t j = k; j < end; ++j) {
        const io_op& o = *ops[order_[j]];
        const iovec one{o.buf, o.len};
        results[order_[j]] = write_vector(o.fd, &one, 1, o.offset, o.rw_flags);
      }
    }
    k = end;
  }
  return worst;
}

}  // namespace deepwell::detail
