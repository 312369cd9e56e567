// The taxi queries' column routes (taxi_route.hpp).
#include "taxi/taxi_route.hpp"

#include <atomic>
#include <chrono>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/bulk_read.hpp"
#include "taxi/taxi_run.hpp"

namespace deepwell::table {
namespace {

// Pages of a column looked at for its residency (32 runs of 16): a cold
// or half-evicted column shows; the cache's own look when it adds the
// column (every page) decides its direct tier, and its route says so.
constexpr uint64_t resident_samples = 512;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* taxi_route_mode_name(taxi_route_mode m) {
  return m == taxi_route_mode::pages ? "pages" : m == taxi_route_mode::bulk ? "bulk" : "auto";
}

taxi_route_mode taxi_route_mode_from(const std::string& text) {
  if (text == "auto") return taxi_route_mode::automatic;
  if (text == "pages") return taxi_route_mode::pages;
  if (text == "bulk") return taxi_route_mode::bulk;
  throw error("route '" + text + "' is not auto, pages or bulk");
}

taxi_route_report route_taxi_columns(const column_file& f, int q, const taxi_route_settings& s) {
  check_taxi_columns(f, q);
  if (s.page_bytes < 4 || s.page_bytes % 4) throw error("taxi route: a page of " + std::to_string(s.page_bytes) + " bytes");
  // A given profile is checked even where no column needs it.
  if (!s.profile.given.empty()) parse_device_profile(s.profile.given);
  const auto t0 = std::chrono::steady_clock::now();
  taxi_route_report rep;
  rep.mode = s.mode;
  for (int c = 0; c <= q; ++c) {
    const column_info& ci = f.column(taxi_query_columns[c]);
    taxi_column_route r;
    r.column = ci.name;
    r.bytes = ci.bytes;
    r.resident = file_resident_share(f.path(), ci.offset, ci.bytes, resident_samples);
    r.pages_needed = (ci.bytes + s.page_bytes - 1) / s.page_bytes;
    r.pages_known = c == 0;
    rep.columns.push_back(r);
  }
  rep.look_seconds = since(t0);
  const uint64_t room = s.bulk_room ? s.bulk_room : page_cache_room() / 2;
  uint64_t planned = 0;  // bytes the bulk reads bring in
  auto decide = [&](taxi_column_route& r) {
    if (r.resident >= 1.0) {
      r.route = read_route::resident;
      r.why = "resident: all of it in the page cache already";
    } else if (!s.no_bulk.empty()) {
      r.why = "pages: " + s.no_bulk;
    } else if (room && s.mode != taxi_route_mode::pages && planned + r.bytes > room) {
      r.why = "pages: a bulk read of its " + std::to_string(r.bytes >> 20) + " MiB would not fit in the page cache (" +
              std::to_string((room - std::min(room, planned)) >> 20) + " MiB of room left for bulk reads)";
    } else if (s.mode == taxi_route_mode::pages) {
      r.why = "pages: asked for (route pages)";
    } else if (s.mode == taxi_route_mode::bulk) {
      r.route = read_route::bulk;
      r.why = "bulk: asked for (route bulk)";
    } else {
      if (!rep.profiled) {
        const auto p0 = std::chrono::steady_clock::now();
        rep.profile = device_profile_for(f.path(), s.profile);
        rep.profile_seconds = since(p0);
        rep.profiled = true;
      }
      const route_choice ch = choose_route(rep.profile, {r.bytes, r.pages_needed, s.page_bytes, s.in_flight});
      r.route = ch.route;
      r.pages_seconds = ch.pages_seconds;
      r.bulk_seconds = ch.bulk_seconds;
      r.why = ch.why;
      if (!r.pages_known) r.why += "; the selection unknown before the query, so every page counted";
    }
    if (r.route == read_route::bulk) planned += r.bytes;
  };
  // A resident column read again only to count its selection is a read of
  // memory, not of storage: not in bulk_bytes.
  auto read_whole = [&](const std::vector<file_extent>& ex, const extent_visitor& v, bool from_storage) {
    const bulk_read_report b = bulk_read(f.path(), ex, {}, v);
    if (from_storage) rep.bulk_bytes += b.bytes;
    rep.bulk_read_seconds += b.seconds;
    rep.bulk_threads = b.threads;
  };
  taxi_column_route& scan = rep.columns[0];
  decide(scan);
  bool gathered_cold = false;
  for (int c = 1; c <= q; ++c) gathered_cold = gathered_cold || rep.columns[c].resident < 1.0;
  // The selection counted where the scan column passes through host
  // memory anyway (a bulk read), or is there already and a gathered column
  // is not (then a read of memory buys the gathered columns' true counts).
  const bool count = q > 0 && gathered_cold && s.no_bulk.empty() &&
                     (scan.route == read_route::bulk ||
                      (scan.route == read_route::resident && s.mode == taxi_route_mode::automatic));
  if (scan.route == read_route::bulk || count) {
    const column_info& ci = f.column(taxi_query_columns[0]);
    std::atomic<uint64_t> touched{0};
    const uint32_t per_page = s.page_bytes / 4;
    extent_visitor v;
    if (count)
      v = [&](size_t, uint64_t, const uint8_t* data, uint64_t bytes) {
        const int32_t* d = reinterpret_cast<const int32_t*>(data);
        const uint64_t n = bytes / 4;
        uint64_t t = 0;
        for (uint64_t p = 0; p < n; p += per_page) {
          const uint64_t e = std::min<uint64_t>(n, p + per_page);
          bool any = false;
          for (uint64_t i = p; i < e; ++i) any |= d[i] >= taxi_long_trip;
          t += any;
        }
        touched += t;
      };
    read_whole({{ci.offset, ci.bytes}}, v, scan.route == read_route::bulk);
    if (scan.route == read_route::resident) scan.why += "; read from memory to count the selection";
    if (count)
      for (int c = 1; c <= q; ++c) {
        rep.columns[c].pages_needed = touched;
        rep.columns[c].pages_known = true;
      }
  }
  std::vector<file_extent> bulk;
  for (int c = 1; c <= q; ++c) {
    decide(rep.columns[c]);
    if (rep.columns[c].route == read_route::bulk) {
      const column_info& ci = f.column(taxi_query_columns[c]);
      bulk.push_back({ci.offset, ci.bytes});
    }
  }
  if (!bulk.empty()) read_whole(bulk, {}, true);
  rep.seconds = since(t0) - rep.profile_seconds - rep.look_seconds;
  return rep;
}

}  // namespace deepwell::table
