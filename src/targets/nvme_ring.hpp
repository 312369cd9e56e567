// One io_uring ring that carries NVMe I/O commands to a namespace's generic
// character device (IORING_OP_URING_CMD, NVME_URING_CMD_IO): 128-byte SQEs
// holding a struct nvme_uring_cmd, 32-byte CQEs, the device as fixed file 0,
// registered buffers where given, IOPOLL where asked. Driven by one thread
// at a time; completions are delivered only from reap().
#pragma once
#include <liburing.h>
#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/io_engine.hpp"
#include "targets/op_fifo.hpp"
#include "targets/op_pool.hpp"

namespace deepwell::detail {

// A failure to set up or use a ring, with the errno the kernel gave (the
// fallback's reason names it).
class nvme_ring_error : public error {
 public:
  nvme_ring_error(int err, const std::string& what) : error(errno_message(what, err)), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

// One NVMe command. done's result: 0 on success, a positive NVMe status
// ((SCT << 8) | SC) the device completed it with, or a negative errno the
// kernel refused it with.
struct nvme_io {
  uint8_t opcode = 0;  // nvme::op_read, op_write, op_flush
  uint32_t nsid = 0;
  void* buf = nullptr;
  uint32_t len = 0;
  uint64_t slba = 0;
  uint32_t nlb = 0;  // blocks (1-based; the command carries nlb - 1)
  bool fua = false;
  int buf_index = -1;  // a registered buffer holding buf (registered_index), or -1
  io_callback done;
};

class nvme_ring {
 public:
  // Throws nvme_ring_error (the kernel's errno) when the ring or the fixed
  // file cannot be set up.
  nvme_ring(int fd, unsigned entries, bool iopoll);
  // Waits (up to 10 s) for commands still in the kernel, whose buffers it
  // writes; their callbacks are not called.
  ~nvme_ring();
  nvme_ring(const nvme_ring&) = delete;
  nvme_ring& operator=(const nvme_ring&) = delete;

  // Queues and submits; a command finds room later if the ring is full.
  void send(const nvme_io& io);
  // Polls (IOPOLL) or looks at the CQ, runs the finished commands'
  // callbacks and submits what waited for room; returns how many finished.
  unsigned reap();
  unsigned in_flight() const { return in_flight_; }
  bool iopoll() const { return iopoll_; }

  // Registers `iov` as fixed buffers (only with nothing in flight: a
  // command in the kernel may be using the old ones), in pieces of at most
  // `piece` bytes that overlap by half (a command of up to piece / 2 bytes
  // lies whole in one): Linux 6.1 counts every page from a command's
  // buffer to the end of its registration as a segment of the command and
  // refuses (EINVAL) past the device's max_segments, so a registration must
  // be no longer than a command may be. False when the kernel refuses
  // (RLIMIT_MEMLOCK); commands then go with plain buffers.
  bool register_buffers(const iovec* iov, unsigned n, uint64_t piece);
  void unregister_buffers();
  // The registered piece holding [buf, buf + len), or -1.
  int registered_index(const void* buf, uint32_t len) const;

  // Sends one command and waits for it (reaping) up to timeout_ns; the
  // probe at open. Returns its result, or -ETIMEDOUT (the command is then
  // still in the kernel: destroy the ring before its buffer goes).
  int64_t run_one(nvme_io io, uint64_t timeout_ns);

  uint64_t fixed_sent() const { return fixed_sent_; }
  uint64_t plain_sent() const { return plain_sent_; }

 private:
  struct record {
    nvme_io io;
    record* next = nullptr;
  };
  bool try_prepare(record* r);
  void submit();

  io_uring ring_{};
  bool iopoll_ = false;
  unsigned cq_capacity_ = 0;
  unsigned in_kernel_ = 0;  // prepared, CQE not reaped
  unsigned in_flight_ = 0;  // sent and not reaped, in the kernel or waiting for room
  struct region {
    const uint8_t* base;
    uint64_t bytes;
    uint32_t first;  // its first piece's index
    uint32_t pieces;
  };
  std::vector<region> regions_;  // what was asked, for lookups
  std::vector<iovec> buffers_;   // the pieces registered
  uint64_t piece_ = 0, stride_ = 0;
  uint64_t fixed_sent_ = 0, plain_sent_ = 0;
  op_pool<record> pool_;
  op_fifo<record> waiting_;  // no room in the SQ or CQ yet
};

}  // namespace deepwell::detail
