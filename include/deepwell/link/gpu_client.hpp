// A GPU client of one queue pair: pins and maps the queue pair's shared
// memory for the GPU (cudaHostRegister, mapped), keeps the client state
// (tickets, command id pool, completion slots) in device memory, and hands
// kernels a queue_ref by value. Construct and destroy it while no kernel
// that uses it runs: registration and freeing synchronize with the device.
#pragma once
#include <memory>

#include "deepwell/common/error.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/queue.hpp"

namespace deepwell {

class queue_pair;

class gpu_queue_client {
 public:
  explicit gpu_queue_client(std::unique_ptr<queue_pair_handle> qp);
  // A queue pair of a controller in this process (tests, benchmarks);
  // defined by the controller layer, which makes such queue pairs.
  explicit gpu_queue_client(std::shared_ptr<queue_pair> qp);
  ~gpu_queue_client();
  gpu_queue_client(const gpu_queue_client&) = delete;
  gpu_queue_client& operator=(const gpu_queue_client&) = delete;

  const queue_ref& ref() const { return ref_; }
  queue_pair_handle& pair() const { return *qp_; }

 private:
  std::unique_ptr<queue_pair_handle> qp_;
  void* device_state_ = nullptr;
  bool registered_ = false;
  queue_ref ref_;
};

}  // namespace deepwell
