// dw_uring_read_rows: the rows without deepwell (deepwell.baselines in
// Python, and the Python gather benchmark's storage baseline). The same rows
// deepwell gathers, read with plain io_uring by CPU threads (one
// ring each, `depth` reads in flight), no controller and no cache: what the
// file (and, with O_DIRECT, the disk) can give.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "deepwell/c/deepwell.h"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "last_error.hpp"

namespace {

// Reads rows[b, e) with one ring; returns an empty string or what failed.
std::string read_share(const char* path, bool odirect, uint64_t offset, uint32_t row_bytes, const int64_t* rows,
                       uint64_t b, uint64_t e, unsigned depth, uint8_t* out) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (odirect ? O_DIRECT : 0));
  if (fd < 0) return deepwell::errno_message(std::string("open ") + path, errno);
  struct stat st {};
  // (O_NONBLOCK: a FIFO's open would wait for its other end.)
  if (fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))) {
    close(fd);
    return std::string(path) + " is not a regular file or a block device";
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  io_uring ring{};
  if (const int r = io_uring_queue_init(depth, &ring, 0); r < 0) {
    close(fd);
    return deepwell::errno_message("io_uring_queue_init", -r);
  }
  const size_t slot = (size_t(row_bytes) + 4095) & ~size_t(4095);
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, slot * depth));
  if (!buf) {
    io_uring_queue_exit(&ring);
    close(fd);
    return "no memory for " + std::to_string(depth) + " rows of " + std::to_string(row_bytes) + " bytes in flight";
  }
  std::vector<uint64_t> slot_row(depth);
  std::vector<unsigned> free_slots;
  for (unsigned i = 0; i < depth; ++i) free_slots.push_back(i);
  std::string failure;
  uint64_t next = b, done = 0;
  while (done < e - b && failure.empty()) {
    unsigned queued = 0;
    while (next < e && !free_slots.empty()) {
      const unsigned s = free_slots.back();
      free_slots.pop_back();
      slot_row[s] = next;
      io_uring_sqe* q = io_uring_get_sqe(&ring);
      io_uring_prep_read(q, fd, buf + s * slot, row_bytes, offset + uint64_t(rows[next]) * row_bytes);
      io_uring_sqe_set_data64(q, s);
      ++next;
      ++queued;
    }
    if (queued) io_uring_submit(&ring);
    io_uring_cqe* c = nullptr;
    if (const int r = io_uring_wait_cqe(&ring, &c); r < 0) {
      failure = deepwell::errno_message("io_uring_wait_cqe", -r);
      break;
    }
    const unsigned s = unsigned(io_uring_cqe_get_data64(c));
    if (c->res != int(row_bytes))
      failure = c->res < 0 ? deepwell::errno_message("read of row " + std::to_string(rows[slot_row[s]]), -c->res)
                           : "short read of row " + std::to_string(rows[slot_row[s]]);
    else if (out)
      std::memcpy(out + slot_row[s] * row_bytes, buf + s * slot, row_bytes);
    io_uring_cqe_seen(&ring, c);
    free_slots.push_back(s);
    ++done;
  }
  // Drain what is still in flight after a failure before freeing buffers.
  while (next - b > done) {
    io_uring_cqe* c = nullptr;
    if (io_uring_wait_cqe(&ring, &c) < 0) break;
    io_uring_cqe_seen(&ring, c);
    ++done;
  }
  io_uring_queue_exit(&ring);
  std::free(buf);
  close(fd);
  return failure;
}

}  // namespace

extern "C" int dw_uring_read_rows(const char* path, int32_t odirect, uint64_t offset, uint32_t row_bytes,
                                  const int64_t* rows, uint64_t n, uint32_t depth, uint32_t threads, void* out,
                                  double* seconds) {
  if (!path || !rows || !seconds || row_bytes == 0 || depth == 0 || depth > 4096) {
    deepwell::capi::last_error() =
        "dw_uring_read_rows: null path, rows or seconds, a zero row size, or a depth outside 1 to 4096";
    return DW_EINVAL;
  }
  // Every row's byte offset, checked before any read: a negative or huge
  // row would wrap to another row's bytes.
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t at = 0;
    if (rows[i] < 0 || __builtin_mul_overflow(uint64_t(rows[i]), uint64_t(row_bytes), &at) ||
        __builtin_add_overflow(at, offset, &at) || at > uint64_t(INT64_MAX) - row_bytes) {
      deepwell::capi::last_error() = "dw_uring_read_rows: row " + std::to_string(rows[i]) + " (index " +
                                     std::to_string(i) + ") has no byte offset in a file";
      return DW_ERANGE;
    }
  }
  // A ring a thread, each its contiguous share of the rows (0: one thread).
  threads = deepwell::detail::thread_count(threads ? threads : 1);
  std::vector<std::string> failures(threads);
  const auto t0 = std::chrono::steady_clock::now();
  deepwell::detail::parallel_for(n, threads, [&](unsigned t, uint64_t b, uint64_t e) {
    if (b < e) failures[t] = read_share(path, odirect != 0, offset, row_bytes, rows, b, e, depth, static_cast<uint8_t*>(out));
  });
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& f : failures)
    if (!f.empty()) {
      deepwell::capi::last_error() = f;
      return DW_EIO;
    }
  return DW_OK;
}
