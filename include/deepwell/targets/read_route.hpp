// The route chosen at run time for reading a dataset's extent from
// storage: page-granular reads of the pages a query needs, each a random
// read served by the controller, or a bulk read of the whole extent in
// large sequential requests (bulk_read.hpp). The cheaper by the device's
// profile (device_profile.hpp):
//
//   pages: pages_needed x max(1 / rate, page / bandwidth), where rate is the
//          profile's random reads a second scaled down when fewer reads are
//          in flight than it was measured with (never up: the probe's depth
//          is the most it vouches for)
//   bulk:  extent bytes / bandwidth
//
// An extent already wholly in the page cache needs neither (resident).
#pragma once
#include <cstdint>
#include <string>

#include "deepwell/targets/device_profile.hpp"

namespace deepwell {

enum class read_route { pages, bulk, resident };
const char* route_name(read_route r);

struct route_request {
  uint64_t extent_bytes = 0;  // the whole extent a bulk read would read
  uint64_t pages_needed = 0;  // the pages page-granular reads would read
  uint32_t page_bytes = 4096;
  uint32_t in_flight = 1;     // page reads the clients and the controller keep in flight
};

struct route_choice {
  read_route route = read_route::pages;
  double pages_seconds = 0;  // the model's time for each route
  double bulk_seconds = 0;
  std::string why;           // the comparison in words
};

// The cheaper route for `r` on `p` (ties go to pages: nothing read that is
// not needed). Throws deepwell::error for a profile without positive rates
// or a request with no page size.
route_choice choose_route(const device_profile& p, const route_request& r);

}  // namespace deepwell
