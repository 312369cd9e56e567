// Memory beside a page cache for parts built on it (the file API's tables):
// client-private memory (device memory for GPU clients, host memory for CPU
// ones) and host memory both the host and the clients address (pinned and
// mapped for a GPU). Everything is zeroed at allocation and freed with the
// client_memory.
#pragma once
#include <cstdint>
#include <memory>

namespace deepwell {

class client_memory {
 public:
  virtual ~client_memory() = default;
  // Client-private, zeroed.
  virtual void* alloc_private(uint64_t bytes) = 0;
  // Host memory shared with the clients, zeroed: the host's address; the
  // clients' address of the same bytes through client_address().
  virtual void* alloc_shared(uint64_t bytes) = 0;
  virtual void* client_address(void* shared) const = 0;
  // Reads client-private memory (no client may be writing it meanwhile).
  virtual void read_private(void* dst, const void* src, uint64_t bytes) const = 0;
  // Writes client-private memory, beside running clients (a GPU: a copy on
  // a stream of its own, which needs no SM, so it cannot wait on a kernel).
  virtual void write_private(void* dst, const void* src, uint64_t bytes) = 0;
  // Zeroes `bytes` (at most 64) of client-private memory beside running
  // clients without waiting for it: a GPU queues a copy on the stream of
  // write_private. Returns a ticket for wait_private.
  virtual uint64_t zero_private_async(void* dst, uint32_t bytes) = 0;
  // Returns once the zeroing that gave `ticket`, and every earlier one, is done.
  virtual void wait_private(uint64_t ticket) = 0;
  virtual bool on_gpu() const = 0;
};

std::unique_ptr<client_memory> make_host_client_memory();
// The current CUDA device's (deepwell_cuda).
std::unique_ptr<client_memory> make_gpu_client_memory();

}  // namespace deepwell
