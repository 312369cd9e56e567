// The route chosen at run time for a taxi query's columns (read_route.hpp):
// before the query, each column not wholly in the page cache is weighed
// for page-granular reads through the controller against a bulk read of
// its whole section (bulk_read.hpp), by the storage's profile
// (device_profile.hpp). The scan column needs every page; when it is read
// in bulk, the selection is counted on the way, so each gathered column's
// choice weighs the pages the query will really touch (at the cache's page
// size). Columns read in bulk are then in the page cache, where the cache
// reads them through the direct tier (or the controller's buffered reads).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/table/column_file.hpp"
#include "deepwell/targets/device_profile.hpp"
#include "deepwell/targets/read_route.hpp"

namespace deepwell::table {

// automatic: the model decides; pages: every column page by page (the
// route before the model); bulk: every column not resident read whole.
enum class taxi_route_mode { automatic, pages, bulk };
const char* taxi_route_mode_name(taxi_route_mode m);
// "auto", "pages" or "bulk"; throws deepwell::error naming the text otherwise.
taxi_route_mode taxi_route_mode_from(const std::string& text);

struct taxi_route_settings {
  taxi_route_mode mode = taxi_route_mode::automatic;
  device_profile_options profile;
  uint32_t page_bytes = 4096;  // the cache's page
  uint32_t in_flight = 1;      // page reads the clients and the controller keep in flight
  // Why no column may be read in bulk (O_DIRECT asked, a server's
  // dataset); empty: they may.
  std::string no_bulk;
  // The most the bulk reads may bring into the page cache (0: half of
  // page_cache_room() now): columns past it are read page by page, since
  // a bulk read that does not fit evicts its own first extents.
  uint64_t bulk_room = 0;
};

struct taxi_column_route {
  std::string column;
  read_route route = read_route::pages;
  std::string why;
  double resident = 0;        // share in the page cache before the query (of a sample of its pages)
  std::string cache_route;    // what the cache then said of the column (page_cache::route)
  uint64_t bytes = 0;         // the column's section
  uint64_t pages_needed = 0;  // the pages the query touches (all, for the scan column), at page_bytes
  bool pages_known = false;   // pages_needed counted (gathered columns after a bulk scan)
  double pages_seconds = 0, bulk_seconds = 0;  // the model's, where it was asked
};

struct taxi_route_report {
  taxi_route_mode mode = taxi_route_mode::automatic;
  std::vector<taxi_column_route> columns;  // in query order
  bool profiled = false;                   // the model needed the profile
  device_profile profile;
  double profile_seconds = 0;  // finding the profile (a probe the first time on a device); not part of `seconds`
  // The residency look (as the cache's own look when it adds a column, a
  // part of the setup), not part of `seconds`.
  double look_seconds = 0;
  double seconds = 0;          // the routes' work: the bulk reads and the selection's count
  uint64_t bulk_bytes = 0;        // read from storage in bulk
  double bulk_read_seconds = 0;  // the bulk reads' time (a resident scan column's count included)
  unsigned bulk_threads = 0;
};

// Chooses each of query q's columns' route and does the bulk reads.
// Throws deepwell::error for a given profile that does not parse, or a
// failed bulk read (naming the file).
taxi_route_report route_taxi_columns(const column_file& f, int q, const taxi_route_settings& s);

}  // namespace deepwell::table
