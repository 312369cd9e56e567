// A controller in this process: the one place where code above the link
// starts one. A program that runs no server makes its controller_link here;
// caches, arrays and every service take that link (or a server's), never
// the controller, so each runs the same in-process and under `deepwell
// serve` (docs/architecture.md).
#pragma once
#include <memory>

#include "deepwell/controller.hpp"
#include "deepwell/controller_link.hpp"
#include "deepwell/page_cache.hpp"

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

// Caches on a controller the caller keeps alive for as long as the cache.
inline std::shared_ptr<page_cache> make_host_page_cache(controller& ctl, const cache_config& cfg = {}) {
  return make_host_page_cache(in_process_link(ctl), cfg);
}
inline std::shared_ptr<page_cache> make_gpu_page_cache(controller& ctl, const cache_config& cfg = {}) {
  return make_gpu_page_cache(in_process_link(ctl), cfg);
}

}  // namespace deepwell
