// A controller in this process: the one place where code above the link
// starts one. A program that runs no server makes its controller_link here;
// caches, arrays and every service take that link (or a server's), never
// the controller, so each runs the same in-process and under `deepwell
// serve` (docs/architecture.md).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/controller_link.hpp"

namespace deepwell {

// A link to a controller in this process. The first shares its ownership;
// with the second, the controller must outlive the link and everything
// made through it (queue pairs, caches).
std::shared_ptr<controller_link> in_process_link(std::shared_ptr<controller> ctl);
std::shared_ptr<controller_link> in_process_link(controller& ctl);

// A new controller, owned by its link (it stops when the last holder of the
// link, its caches and queue pairs included, lets go).
inline std::shared_ptr<controller_link> embedded_link(const controller_config& cfg = {}) {
  return in_process_link(std::make_shared<controller>(cfg));
}

// A new controller serving `data` as its one namespace, owned by the link.
struct embedded_namespace {
  std::shared_ptr<controller_link> link;
  uint32_t nsid = 0;
};
embedded_namespace embed_target(std::shared_ptr<target> data, uint32_t block_size, bool read_only,
                                const controller_config& cfg = {});

// What the controller behind an in-process link has done: its I/O
// backend, its queues' totals, its pollers' CPU time. Nothing for another
// link (a server's counters are `deepwell stat`'s).
struct embedded_counters {
  std::string backend;
  queue_counters totals;
  double poller_cpu_seconds = 0;
};
std::optional<embedded_counters> counters_of(const controller_link& link);

// Caches on a controller the caller keeps alive for as long as the cache.
inline std::shared_ptr<page_cache> make_host_page_cache(controller& ctl, const cache_config& cfg = {}) {
  return make_host_page_cache(in_process_link(ctl), cfg);
}
inline std::shared_ptr<page_cache> make_gpu_page_cache(controller& ctl, const cache_config& cfg = {}) {
  return make_gpu_page_cache(in_process_link(ctl), cfg);
}

}  // namespace deepwell
