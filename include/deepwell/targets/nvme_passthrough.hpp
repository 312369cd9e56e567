// An NVMe namespace served without the block layer's request path: each
// read, write and flush the controller has checked goes to the drive as an
// NVMe Read, Write or Flush through the namespace's generic character
// device (/dev/ngXnY) as an io_uring IORING_OP_URING_CMD, on a ring a
// poller of its own (128-byte SQEs, 32-byte CQEs), with the device as a
// fixed file, the poller's registered staging as fixed buffers where the
// memory lock limit allows, and polled completions (IOPOLL) where the
// device has poll queues. Where passthrough cannot be had (no /dev/ng*, a
// kernel without uring_cmd, EACCES/EPERM, EOPNOTSUPP) make_nvme_target
// falls back to the namespace's block device through the file target and
// says why, once, in the log and in describe().
//
// What it needs: read (and, for writes, write) access to /dev/ngXnY, and
// on Linux before 6.2 CAP_SYS_ADMIN (6.2 checks the file's mode instead);
// the namespace's geometry comes from sysfs, which needs no privilege
// (Identify Namespace by admin passthrough needs CAP_SYS_ADMIN on 6.1).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/targets/target.hpp"

namespace deepwell {

struct nvme_options {
  bool writable = false;  // refused, naming the namespace, when it is read-only
  // Polled completions: automatic uses them where the device has poll
  // queues (sysfs queue/io_poll; the nvme driver's poll_queues=N).
  enum class polling { automatic, on, off } poll = polling::automatic;
  // Where passthrough is unavailable: the block device through the file
  // target (O_DIRECT unless fallback_direct is false), or an error.
  bool fallback = true;
  bool fallback_direct = true;
};

// What sysfs and the device say about a namespace.
struct nvme_namespace_info {
  std::string char_path;   // /dev/ngXnY
  std::string block_path;  // /dev/nvmeXnY
  uint32_t nsid = 0;       // NVME_IOCTL_ID, checked against sysfs
  uint32_t lba_bytes = 0;  // logical block size
  uint64_t lbas = 0;       // capacity in logical blocks
  bool read_only = false;
  bool poll_queues = false;     // the device has poll queues (queue/io_poll)
  uint32_t max_transfer = 0;    // bytes one command may move (larger requests are split)
};

// Reads sysfs for the namespace of `path` (/dev/ngXnY or /dev/nvmeXnY).
// Throws deepwell::error naming the path and what is missing.
nvme_namespace_info nvme_namespace(const std::string& path);

// Passthrough, or nothing: throws deepwell::error saying why it is
// unavailable (the message starts with the path). Tests use it to insist.
std::shared_ptr<target> open_nvme_passthrough(const std::string& path, const nvme_options& opts = {});

// Passthrough where it works; else (opts.fallback) the block device, with
// one warning naming the reason; describe() says which route is in use.
std::shared_ptr<target> make_nvme_target(const std::string& path, const nvme_options& opts = {});

}  // namespace deepwell
