// A CPU client of one queue pair: owns the client-side state in host memory
// and offers synchronous calls on top of the same queue_ref code GPU threads
// run. Any number of CPU threads may share one host_queue_client.
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/common/defaults.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/queue.hpp"

namespace deepwell {

class queue_pair;

class host_queue_client {
 public:
  explicit host_queue_client(std::unique_ptr<queue_pair_handle> qp);
  // A queue pair of a controller in this process (tests, benchmarks);
  // defined by the controller layer, which makes such queue pairs.
  explicit host_queue_client(std::shared_ptr<queue_pair> qp);
  ~host_queue_client();
  host_queue_client(const host_queue_client&) = delete;
  host_queue_client& operator=(const host_queue_client&) = delete;

  const queue_ref& ref() const { return ref_; }
  queue_pair_handle& pair() const { return *qp_; }

  // Reads `nblocks` blocks of `block_size` bytes at `lba` into dst.
  request_status read(uint32_t nsid, uint64_t lba, uint32_t nblocks, uint32_t block_size, void* dst,
                      uint64_t timeout_ns = defaults::timeout_ns()) const;
  request_status write(uint32_t nsid, uint64_t lba, uint32_t nblocks, uint32_t block_size, const void* src,
                       uint64_t timeout_ns = defaults::timeout_ns()) const;
  request_status flush(uint32_t nsid, uint64_t timeout_ns = defaults::timeout_ns()) const;
  request_status identify(uint32_t nsid, nvme::identify_namespace& out,
                          uint64_t timeout_ns = defaults::timeout_ns()) const;
  // Sends any command as is (tests use this to send malformed ones). The
  // command's data buffer is the id's staging slot unless the command's prp1
  // is set by `keep_prp1`. `in`/`out` are copied to/from that slot.
  wait_result raw(nvme::command c, bool keep_prp1 = false, const void* in = nullptr, size_t in_bytes = 0,
                  void* out = nullptr, size_t out_bytes = 0, uint64_t timeout_ns = defaults::timeout_ns()) const;

 private:
  std::unique_ptr<queue_pair_handle> qp_;
  void* state_ = nullptr;
  queue_ref ref_;
};

}  // namespace deepwell
