// A free list of per-operation records for one engine, used only by the
// engine's owner thread. Records are allocated in chunks and never freed
// until the pool goes, so the hot path (take/give) never allocates once the
// pool has grown to the number of operations in flight.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

namespace deepwell::detail {

// Record must have a `Record* next` member (used while the record is free).
template <class Record>
class op_pool {
 public:
  explicit op_pool(size_t chunk) : chunk_(chunk ? chunk : 1) { grow(); }
  op_pool(const op_pool&) = delete;
  op_pool& operator=(const op_pool&) = delete;

  Record* take() {
    if (!free_) grow();
    Record* r = free_;
    free_ = r->next;
    r->next = nullptr;
    return r;
  }

  void give(Record* r) {
    r->next = free_;
    free_ = r;
  }

 private:
  void grow() {
    chunks_.push_back(std::make_unique<Record[]>(chunk_));
    Record* c = chunks_.back().get();
    for (size_t i = 0; i < chunk_; ++i) give(&c[i]);
  }

  size_t chunk_;
  Record* free_ = nullptr;
  std::vector<std::unique_ptr<Record[]>> chunks_;
};

}  // namespace deepwell::detail
