// A client's queue pair: its own mapping of the queue pair's memfd.
#include "deepwell/link/controller_link.hpp"

#include "deepwell/common/error.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell {

queue_pair_handle::queue_pair_handle(uint32_t id, const qp_geometry& g, int memfd, size_t bytes,
                                     std::function<void()> on_close)
    : id_(id), geometry_(g), on_close_(std::move(on_close)) {
  try {
    region_ = shared_region::map(memfd, bytes);
    base_ = region_.data();
    bytes_ = region_.size();
    memfd_ = region_.fd();
    check();
  } catch (...) {
    if (on_close_) on_close_();
    throw;
  }
}

queue_pair_handle::queue_pair_handle(uint32_t id, const qp_geometry& g, void* base, size_t bytes, int memfd,
                                     std::function<void()> on_close)
    : id_(id), geometry_(g), base_(base), bytes_(bytes), memfd_(memfd), on_close_(std::move(on_close)) {
  try {
    check();
  } catch (...) {
    if (on_close_) on_close_();
    throw;
  }
}

void queue_pair_handle::check() const {
  const qp_layout l = compute_layout(geometry_);
  const qp_header* h = header();
  if (!h || bytes_ < l.total_bytes || h->magic != qp_magic || h->version != qp_version || h->qid != id_ ||
      h->sq_entries != geometry_.sq_entries || h->cq_entries != geometry_.cq_entries ||
      h->slot_bytes != geometry_.slot_bytes)
    throw error("queue pair " + std::to_string(id_) + ": its shared memory does not hold the queue pair asked for");
}

queue_pair_handle::~queue_pair_handle() {
  if (on_close_) on_close_();
}

queue_state queue_pair_handle::state() const { return queue_state(shared_load_acquire(&header()->state)); }

}  // namespace deepwell
