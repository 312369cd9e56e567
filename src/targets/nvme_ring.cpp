// The NVMe passthrough ring (nvme_ring.hpp).
#include "targets/nvme_ring.hpp"

#include <linux/nvme_ioctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace deepwell::detail {
namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

bool transient(int ret) { return ret == -EAGAIN || ret == -EBUSY || ret == -EINTR; }

}  // namespace

nvme_ring::nvme_ring(int fd, unsigned entries, bool iopoll) : iopoll_(iopoll), pool_(entries ? entries : 1) {
  io_uring_params p{};
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32 | IORING_SETUP_CLAMP | (iopoll ? IORING_SETUP_IOPOLL : 0);
  int ret = io_uring_queue_init_params(entries ? entries : 1, &ring_, &p);
  if (ret < 0)
    throw nvme_ring_error(-ret, std::string("io_uring ring with 128-byte SQEs and 32-byte CQEs") +
                                    (iopoll ? " and IOPOLL" : "") + " (Linux 5.19 or later)");
  cq_capacity_ = p.cq_entries;
  // A fixed file spares each command the descriptor table's lookup and
  // reference count.
  ret = io_uring_register_files(&ring_, &fd, 1);
  if (ret < 0) {
    io_uring_queue_exit(&ring_);
    throw nvme_ring_error(-ret, "io_uring_register_files");
  }
}

nvme_ring::~nvme_ring() {
  // What is still in the kernel writes into caller buffers: wait for it.
  // A device that never answers must not hang the process, so after 10 s
  // the ring closes anyway (the kernel cancels what is left) and says so.
  const uint64_t deadline = mono_ns() + 10'000'000'000ull;
  while (in_kernel_ > 0) {
    if (mono_ns() > deadline) {
      std::fprintf(stderr, "deepwell: nvme passthrough: %u command(s) still in flight after 10 s; closing the ring\n",
                   in_kernel_);
      break;
    }
    if (iopoll_) (void)io_uring_get_events(&ring_);
    io_uring_cqe* cqe = nullptr;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) ++seen;
    io_uring_cq_advance(&ring_, seen);
    in_kernel_ -= std::min(in_kernel_, seen);
    if (seen == 0 && !iopoll_) {
      __kernel_timespec ts{0, 1'000'000};
      (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
  }
  io_uring_queue_exit(&ring_);
}

int nvme_ring::registered_index(const void* buf, uint32_t len) const {
  const auto* p = static_cast<const uint8_t*>(buf);
  for (const region& r : regions_) {
    if (p < r.base || p + len > r.base + r.bytes) continue;
    // The piece starting at or before buf, else the one before it (they
    // overlap by half).
    const uint64_t k = std::min<uint64_t>(uint64_t(p - r.base) / stride_, r.pieces - 1);
    for (const uint64_t j : {k, k ? k - 1 : k}) {
      const iovec& v = buffers_[r.first + j];
      const auto* b = static_cast<const uint8_t*>(v.iov_base);
      if (p >= b && p + len <= b + v.iov_len) return int(r.first + j);
    }
    return -1;
  }
  return -1;
}

bool nvme_ring::register_buffers(const iovec* iov, unsigned n, uint64_t piece) {
  unregister_buffers();
  if (n == 0 || in_kernel_ != 0) return false;
  constexpr uint64_t page = 4096, max_buffers = 1u << 14;  // IORING_MAX_REG_BUFFERS
  piece = std::max<uint64_t>(piece / page * page, 2 * page);
  for (;; piece *= 2) {  // pieces past the kernel's count: longer ones (then refused, as before)
    uint64_t count = 0;
    for (unsigned i = 0; i < n; ++i) count += iov[i].iov_len <= piece ? 1 : (iov[i].iov_len - piece + piece / 2 - 1) / (piece / 2) + 1;
    if (count <= max_buffers) break;
  }
  piece_ = piece;
  stride_ = piece / 2;
  std::vector<iovec> pieces;
  std::vector<region> regions;
  for (unsigned i = 0; i < n; ++i) {
    region r{static_cast<const uint8_t*>(iov[i].iov_base), iov[i].iov_len, uint32_t(pieces.size()), 0};
    for (uint64_t off = 0;; off += stride_) {
      const uint64_t len = std::min<uint64_t>(piece, r.bytes - off);
      pieces.push_back({static_cast<uint8_t*>(iov[i].iov_base) + off, size_t(len)});
      ++r.pieces;
      if (off + len >= r.bytes) break;
    }
    regions.push_back(r);
  }
  if (io_uring_register_buffers(&ring_, pieces.data(), unsigned(pieces.size())) < 0) return false;  // ENOMEM, ...
  buffers_ = std::move(pieces);
  regions_ = std::move(regions);
  return true;
}

void nvme_ring::unregister_buffers() {
  if (buffers_.empty()) return;
  io_uring_unregister_buffers(&ring_);
  buffers_.clear();
  regions_.clear();
}

bool nvme_ring::try_prepare(record* r) {
  if (in_kernel_ >= cq_capacity_) return false;  // never more in the kernel than the CQ holds
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {
    submit();
    sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return false;
  }
  const nvme_io& io = r->io;
  std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));  // a 128-byte entry
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = 0;  // fixed file 0: the device
  sqe->flags = IOSQE_FIXED_FILE;
  sqe->cmd_op = NVME_URING_CMD_IO;
  auto* cmd = reinterpret_cast<nvme_uring_cmd*>(sqe->cmd);
  cmd->opcode = io.opcode;
  cmd->nsid = io.nsid;
  if (io.len) {
    cmd->addr = reinterpret_cast<uintptr_t>(io.buf);
    cmd->data_len = io.len;
    cmd->cdw10 = uint32_t(io.slba);
    cmd->cdw11 = uint32_t(io.slba >> 32);
    cmd->cdw12 = (io.nlb - 1) | (io.fua ? 1u << 30 : 0);
    const int index = io.buf_index;
    if (index >= 0 && size_t(index) < buffers_.size()) {
      sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
      sqe->buf_index = uint16_t(index);
      ++fixed_sent_;
    } else {
      ++plain_sent_;
    }
  }
  io_uring_sqe_set_data(sqe, r);
  ++in_kernel_;
  return true;
}

void nvme_ring::submit() {
  if (io_uring_sq_ready(&ring_) == 0) return;
  const int ret = io_uring_submit(&ring_);
  if (ret < 0 && !transient(ret)) throw nvme_ring_error(-ret, "io_uring_submit (nvme passthrough)");
}

void nvme_ring::send(const nvme_io& io) {
  record* r = pool_.take();
  r->io = io;
  ++in_flight_;
  // Nothing overtakes what already waits for room.
  if (!waiting_.empty() || !try_prepare(r)) waiting_.push_back(r);
  submit();
}

unsigned nvme_ring::reap() {
  // An IOPOLL ring's completions are found only by asking the kernel to
  // poll the device's queues; a ring with interrupts has them in the CQ.
  if (iopoll_ && in_kernel_ > 0) (void)io_uring_get_events(&ring_);
  struct finished {
    io_callback done;
    int64_t result;
  };
  unsigned total = 0;
  for (;;) {
    constexpr unsigned batch_max = 32;
    finished batch[batch_max];
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    unsigned head;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      auto* r = static_cast<record*>(io_uring_cqe_get_data(cqe));
      batch[n++] = {r->io.done, cqe->res};
      pool_.give(r);
      if (n == batch_max) break;
    }
    io_uring_cq_advance(&ring_, n);
    in_kernel_ -= n;
    in_flight_ -= n;
    // Room freed: what waited goes in before any callback can send more.
    while (!waiting_.empty() && try_prepare(waiting_.front())) waiting_.pop_front();
    submit();
    for (unsigned i = 0; i < n; ++i) batch[i].done(batch[i].result);
    total += n;
    if (n < batch_max) break;
  }
  return total;
}

int64_t nvme_ring::run_one(nvme_io io, uint64_t timeout_ns) {
  struct waiter {
    bool done = false;
    int64_t result = 0;
    static void fn(void* ctx, int64_t r) {
      auto* w = static_cast<waiter*>(ctx);
      w->done = true;
      w->result = r;
    }
  } w;
  io.done = {&waiter::fn, &w};
  send(io);
  const uint64_t deadline = mono_ns() + timeout_ns;
  while (!w.done) {
    reap();
    if (w.done) break;
    if (mono_ns() > deadline) return -ETIMEDOUT;  // the destructor waits for it
    if (!iopoll_) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{0, 1'000'000};
      (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
  }
  return w.result;
}

}  // namespace deepwell::detail
