// Validation of one NVMe command, on the controller's private copy of it.
// Kept apart from the poller so every path can be tested on its own.
#pragma once
#include <cstdint>

#include "deepwell/protocol/nvme.hpp"

namespace deepwell::detail {

// What the controller knows about a namespace when checking a command.
struct ns_limits {
  uint32_t block_size = 0;
  uint64_t blocks = 0;
  bool read_only = false;
  uint32_t memory_alignment = 1;  // staging buffer alignment the target needs (O_DIRECT)
};

// What the controller knows about the queue the command came from.
struct queue_limits {
  uint64_t staging_bytes = 0;
  uint32_t max_transfer = 0;  // bytes of one command (the queue pair's slot size)
};

struct checked_command {
  uint8_t opcode = 0;
  uint32_t nsid = 0;
  uint64_t byte_offset = 0;  // in the dataset
  uint32_t bytes = 0;
  uint64_t buffer_offset = 0;  // in the staging region
  bool fua = false;
};

// Looks a namespace up by id; returns nullptr for ids that do not exist.
using ns_lookup = const ns_limits* (*)(const void* ctx, uint32_t nsid);

// Returns success and fills `out`, or the status the command must complete
// with. Command id uniqueness is the caller's to check (it needs queue state).
nvme::status check_command(const nvme::command& c, const queue_limits& q, ns_lookup lookup,
                           const void* lookup_ctx, checked_command& out);

}  // namespace deepwell::detail
