// What a C handle to a durable service (a KV store, a checkpoint store) owns.
#pragma once
#include <memory>
#include <mutex>

#include "deepwell/cache/page_cache.hpp"
#include "cuda_shim.hpp"

namespace deepwell::capi {

// Members go in reverse order of teardown: the store, then its cache (and
// queue pairs), then the link (which owns a controller in this process).
// The store and the cache go with the handle's device current, since their
// GPU memory belongs to it.
template <class Store>
struct store_handle {
  std::shared_ptr<controller_link> link;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<Store> store;
  int device = -1;
  // One call at a time on the store: handles may be used from several
  // threads (base.h), and a store's batch keeps its scratch in the store.
  std::mutex calls;

  ~store_handle() {
    device_guard g;
    try {
      g = on_device(device);
    } catch (...) {  // torn down all the same: a destructor reports nothing
    }
    store.reset();
    cache.reset();
  }
};

}  // namespace deepwell::capi
