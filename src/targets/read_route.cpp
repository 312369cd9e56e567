// The cost model of read_route.hpp.
#include "deepwell/targets/read_route.hpp"

#include <algorithm>
#include <cstdio>

#include "deepwell/common/error.hpp"

namespace deepwell {

const char* route_name(read_route r) {
  switch (r) {
    case read_route::pages: return "pages";
    case read_route::bulk: return "bulk";
    case read_route::resident: return "resident";
  }
  return "?";
}

route_choice choose_route(const device_profile& p, const route_request& r) {
  if (!(p.random_iops > 0) || !(p.seq_bytes_per_s > 0) || p.depth == 0)
    throw error("read route: the device profile needs positive iops, bandwidth and depth (" + device_profile_text(p) + ")");
  if (r.page_bytes == 0) throw error("read route: a page size of 0 bytes");
  const double rate = p.random_iops * std::min(1.0, double(std::max(1u, r.in_flight)) / double(p.depth));
  const double per_page = std::max(1.0 / rate, double(r.page_bytes) / p.seq_bytes_per_s);
  route_choice c;
  c.pages_seconds = double(r.pages_needed) * per_page;
  c.bulk_seconds = double(r.extent_bytes) / p.seq_bytes_per_s;
  c.route = c.bulk_seconds < c.pages_seconds ? read_route::bulk : read_route::pages;
  char b[320];
  std::snprintf(b, sizeof b,
                "%s: %.1f MiB whole at %.0f MiB/s ~ %.3f s %s %llu pages of %u B at %.0f/s (%u in flight) ~ %.3f s "
                "(profile %s)",
                route_name(c.route), double(r.extent_bytes) / 1048576.0, p.seq_bytes_per_s / 1048576.0, c.bulk_seconds,
                c.route == read_route::bulk ? "<" : ">=", (unsigned long long)r.pages_needed, r.page_bytes,
                1.0 / per_page, r.in_flight, c.pages_seconds, p.source.c_str());
  c.why = b;
  return c;
}

}  // namespace deepwell
