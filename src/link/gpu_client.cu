#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/link/gpu_client.hpp"

namespace deepwell {

gpu_queue_client::gpu_queue_client(std::unique_ptr<queue_pair_handle> qp) : qp_(std::move(qp)) {
  if (!qp_) throw error("gpu_queue_client: no queue pair");
  // Mapped: kernels read and write the rings and staging over the host link.
  check_cuda(cudaHostRegister(qp_->base(), qp_->bytes(), cudaHostRegisterMapped | cudaHostRegisterPortable),
             "cudaHostRegister of the queue pair's shared memory");
  registered_ = true;
  void* dev_base = nullptr;
  check_cuda(cudaHostGetDevicePointer(&dev_base, qp_->base(), 0), "cudaHostGetDevicePointer");
  const client_state_layout l = compute_client_layout(qp_->geometry());
  std::vector<uint8_t> init(l.total_bytes);
  init_client_state(init.data(), qp_->geometry(), l);
  check_cuda(cudaMalloc(&device_state_, l.total_bytes), "cudaMalloc of queue client state");
  check_cuda(cudaMemcpy(device_state_, init.data(), l.total_bytes, cudaMemcpyHostToDevice),
             "cudaMemcpy of queue client state");
  ref_ = make_queue_ref(dev_base, device_state_, qp_->geometry());
}

gpu_queue_client::~gpu_queue_client() {
  if (device_state_) cudaFree(device_state_);
  if (registered_) cudaHostUnregister(qp_->base());
}

}  // namespace deepwell
