// dw_cache_options (the C ABI) to and from deepwell::cache_options, for
// every entry point that makes a cache: the defaults an init function
// shows, the checks an open makes, the controller's pollers.
#pragma once
#include <cstdint>
#include <string>

#include "deepwell/c/deepwell.h"
#include "deepwell/cache/cache_options.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/controller/embedded.hpp"
#include "guarded.hpp"

namespace deepwell::capi {

inline cache_options from_c(const dw_cache_options& c) {
  return {c.device,  c.page_size,   c.cache_bytes,  c.queue_pairs,  c.queue_entries,
          c.pollers, c.cpu_threads, c.odirect != 0, c.direct_files, c.timeout_s};
}

// What an init function shows: the entry point's defaults (`base`, built
// from defaults.hpp and the entry point's own), a host cache. A junk
// DEEPWELL_* value leaves the field 0 and the message for the open to
// report (it reads the variable again).
template <class MakeBase>
void init_c(dw_cache_options& c, MakeBase&& base) {
  c = dw_cache_options{};
  c.device = -1;
  c.direct_files = -1;
  try {
    const cache_config k = base();
    c.page_size = k.page_size;
    c.cache_bytes = k.capacity_bytes;
    c.queue_pairs = k.queue_pairs;
    c.queue_entries = k.queue_entries;
    c.direct_files = int32_t(k.direct_files);
    c.timeout_s = double(k.timeout_ns) * 1e-9;
    c.pollers = defaults::pollers();
  } catch (const error& e) {
    last_error() = e.what();
  }
}

// The open's checks: the fields' ranges (a deepwell::error, which
// guarded() answers with DW_EINVAL) and the CUDA device.
inline void check(const cache_options& o) {
  o.check();
  if (o.device >= 0) {
    const int n = gpu_device_count();
    need(o.device < n, "CUDA device " + std::to_string(o.device) + " does not exist (" + std::to_string(n) +
                           " device" + (n == 1 ? "" : "s") + ")");
  }
}

// What two opens must agree on to share one cache: every field that shapes
// it (with `local`, the in-process controller's pollers and O_DIRECT too).
inline std::string cache_key(const dw_cache_options& c, bool local) {
  std::string k;
  for (uint64_t v : {uint64_t(int64_t(c.device)), uint64_t(c.page_size), c.cache_bytes, uint64_t(c.queue_pairs),
                     uint64_t(c.queue_entries), uint64_t(int64_t(c.direct_files)), uint64_t(c.timeout_s * 1e6)})
    k += std::to_string(v) + ":";
  if (local) k += std::to_string(c.odirect != 0) + ":" + std::to_string(c.pollers) + ":";
  return k;
}

inline controller_config controller_of(const cache_options& o) {
  controller_config cc;
  if (o.pollers) cc.pollers = o.pollers;
  return cc;
}

}  // namespace deepwell::capi
