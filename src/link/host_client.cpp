#include "deepwell/link/host_client.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "deepwell/common/error.hpp"

namespace deepwell {

host_queue_client::host_queue_client(std::unique_ptr<queue_pair_handle> qp) : qp_(std::move(qp)) {
  if (!qp_) throw error("host_queue_client: no queue pair");
  const client_state_layout l = compute_client_layout(qp_->geometry());
  state_ = std::aligned_alloc(128, align_up(l.total_bytes, 128));
  if (!state_) throw error("host_queue_client: out of memory for client state");
  init_client_state(state_, qp_->geometry(), l);
  ref_ = make_queue_ref(qp_->base(), state_, qp_->geometry());
}

host_queue_client::~host_queue_client() { std::free(state_); }

wait_result host_queue_client::raw(nvme::command c, bool keep_prp1, const void* in, size_t in_bytes, void* out,
                                   size_t out_bytes, uint64_t timeout_ns) const {
  const uint64_t deadline = now_ns() + timeout_ns;
  uint16_t cid;
  wait_result r;
  r.status = ref_.acquire_cid(cid, deadline);
  if (!r.status.ok()) return r;
  if (!keep_prp1) c.prp1 = ref_.buffer_offset(cid);
  if (in && in_bytes) std::memcpy(ref_.buffer(cid), in, std::min<size_t>(in_bytes, ref_.slot_bytes));
  ref_.submit(cid, c);
  r = ref_.wait(cid, deadline);
  if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) return r;  // id abandoned
  if (r.status.ok() && out && out_bytes) std::memcpy(out, ref_.buffer(cid), std::min<size_t>(out_bytes, ref_.slot_bytes));
  ref_.release_cid(cid);
  return r;
}

request_status host_queue_client::read(uint32_t nsid, uint64_t lba, uint32_t nblocks, uint32_t block_size, void* dst,
                                       uint64_t timeout_ns) const {
  const size_t bytes = size_t(nblocks) * block_size;
  if (nblocks == 0 || bytes > ref_.slot_bytes) return request_status::client(client_code::invalid_argument);
  return raw(nvme::make_read(nsid, lba, nblocks, 0), false, nullptr, 0, dst, bytes, timeout_ns).status;
}

request_status host_queue_client::write(uint32_t nsid, uint64_t lba, uint32_t nblocks, uint32_t block_size,
                                        const void* src, uint64_t timeout_ns) const {
  const size_t bytes = size_t(nblocks) * block_size;
  if (nblocks == 0 || bytes > ref_.slot_bytes) return request_status::client(client_code::invalid_argument);
  return raw(nvme::make_write(nsid, lba, nblocks, 0), false, src, bytes, nullptr, 0, timeout_ns).status;
}

request_status host_queue_client::flush(uint32_t nsid, uint64_t timeout_ns) const {
  // Flush carries no data pointer: keep prp1 at 0.
  return raw(nvme::make_flush(nsid), true, nullptr, 0, nullptr, 0, timeout_ns).status;
}

request_status host_queue_client::identify(uint32_t nsid, nvme::identify_namespace& out, uint64_t timeout_ns) const {
  if (ref_.slot_bytes < sizeof(out)) return request_status::client(client_code::invalid_argument);
  return raw(nvme::make_identify_namespace(nsid, 0), false, nullptr, 0, &out, sizeof(out), timeout_ns).status;
}

}  // namespace deepwell
