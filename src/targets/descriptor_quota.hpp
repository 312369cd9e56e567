// Descriptors a server's tree sessions may hold (local_tree.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace deepwell::detail {

// Descriptors a server's tree sessions may hold: counters of what is left,
// one per pool a descriptor is taken from (a uid's share, the server's
// budget), so that no client's opens can take the descriptors the server
// needs for the others. Shared by the sessions (and their files) that
// draw on the same pools.
struct descriptor_quota {
  std::vector<std::shared_ptr<std::atomic<int64_t>>> pools;
  // One descriptor from every pool, or none (false) where one is empty.
  bool take() {
    for (size_t i = 0; i < pools.size(); ++i)
      if (pools[i]->fetch_sub(1, std::memory_order_relaxed) <= 0) {
        for (size_t j = 0; j <= i; ++j) pools[j]->fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    return true;
  }
  void give() {
    for (auto& p : pools) p->fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace deepwell::detail
