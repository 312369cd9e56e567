// `deepwell table` (table_command.hpp).
#include "table_command.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli_checks.hpp"
#include <nlohmann/json.hpp>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/device_profile.hpp"
#include "taxi/taxi.hpp"
#include "taxi/taxi_run.hpp"
#include "gpu_probe.hpp"
#include "json_lines.hpp"
#include "size_arg.hpp"
#include "ticker.hpp"

namespace deepwell::tools {
namespace {

// An empty option: 0, the library's default.
uint64_t parse_size(const std::string& s, const char* what) { return s.empty() ? 0 : parse_size_arg(s, what); }

nlohmann::json profile_json(const device_profile& p) {
  return {{"iops", p.random_iops}, {"read_bytes", p.read_bytes}, {"depth", p.depth},
          {"bandwidth", p.seq_bytes_per_s}, {"source", p.source}, {"note", p.note}, {"key", p.key}};
}

// The routes and why, as `--json` and the taxi probe's record carry them.
nlohmann::json route_json(const deepwell::table::taxi_route_report& r) {
  nlohmann::json cols = nlohmann::json::array();
  for (const auto& c : r.columns)
    cols.push_back({{"column", c.column}, {"route", route_name(c.route)}, {"why", c.why}, {"cache_route", c.cache_route}, {"resident", c.resident},
                    {"bytes", c.bytes}, {"pages_needed", c.pages_needed}, {"pages_known", c.pages_known},
                    {"model_pages_seconds", c.pages_seconds}, {"model_bulk_seconds", c.bulk_seconds}});
  nlohmann::json j = {{"mode", taxi_route_mode_name(r.mode)}, {"columns", cols}, {"seconds", r.seconds},
                      {"bulk_bytes", r.bulk_bytes}, {"bulk_read_seconds", r.bulk_read_seconds},
                      {"bulk_threads", r.bulk_threads}, {"profile_seconds", r.profile_seconds},
                      {"look_seconds", r.look_seconds}};
  j["profile"] = r.profiled ? profile_json(r.profile) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

void add_command(CLI::App& app, table_command& t) {
  t.app = app.add_subcommand("table", "the column store and the taxi queries Q0-Q5 (docs/analytics.md)");
  t.app->require_subcommand(1);
  t.gen = t.app->add_subcommand("gen", "write a deterministic NYC-taxi-trip table as a column file");
  t.gen->add_option("path", t.path, "the column file to write")->required();
  t.gen->add_option("--rows", t.rows, "rows (trips)")->capture_default_str()->check(deepwell::tools::not_negative);
  t.gen->add_option("--seed", t.seed, "generator seed")->check(deepwell::tools::not_negative);
  t.gen->add_option("--row-group", t.row_group_rows, "rows per statistics row group")->check(deepwell::tools::not_negative);
  t.gen->add_option("--threads", t.workers, "generator threads (0: every core)");
  t.info = t.app->add_subcommand("info", "print a column file's columns, types and sections");
  t.info->add_option("path", t.path, "the column file")->required();
  t.info->add_flag("--check", t.check, "check every block of every column against its checksum (version 2)");
  t.info->add_option("--threads", t.workers, "threads for --check (0: every core)");
  t.query = t.app->add_subcommand("query", "run taxi queries (default Q0-Q5) on the GPU, or CPU threads with --cpu");
  t.query->add_option("path", t.path, "the column file (deepwell table gen, or python -m deepwell.table convert)")->required();
  t.query->add_option("-q,--query", t.queries, "query numbers 0-5 (repeatable; default all)")->check(CLI::Range(0, 5))->default_str("");
  t.query->add_flag("--cpu", t.cpu, "CPU threads as clients (no GPU needed)");
  t.query->add_option("--workers", t.workers, "CPU threads with --cpu, warps on the GPU (0: the machine's)");
  t.query->add_flag("--check", t.check, "compare each answer with a plain scan of the file");
  t.query->add_flag("--odirect", t.odirect, "read the file with O_DIRECT (past the page cache)");
  t.query->add_option("--cache", t.cache, "cache size (e.g. 1GiB; default the library's)");
  t.query->add_option("--page", t.page, "page size (e.g. 4096 or 16K)")->transform(page_bytes);
  t.query->add_flag("--no-direct-tier", t.no_direct, "GPU: every miss through the controller, even for columns in the page cache");
  t.query->add_option("--pollers", t.pollers, "controller poller threads (0: the library's default)");
  t.query->add_option("--server", t.server,
                      "serve the misses from a `deepwell serve` at this socket (the file must be a dataset it grants "
                      "you); default: a controller in this process");
  t.query->add_flag("--page-gather", t.page_gather,
                    "bring the selected rows' pages into the cache (default: read their values alone from a direct tier)");
  t.query->add_option("--route", t.route,
                      "how columns not in the page cache are read: auto (the cheaper by the device's profile), "
                      "pages (page by page through the controller) or bulk (whole, in large sequential reads)")
      ->check(CLI::IsMember({"auto", "pages", "bulk"}))
      ->capture_default_str();
  t.query->add_option("--device-profile", t.device_profile,
                      "what the storage can do, e.g. iops=70000,bandwidth=1.5GiB (default: DEEPWELL_DEVICE_PROFILE, "
                      "else measured once a device and cached under $XDG_CACHE_HOME/deepwell)");
  t.query->add_option("--json", t.json, "append a JSON line per query here")->check(appendable);
  t.profile = t.app->add_subcommand("profile", "the profile of the storage under a file: random reads/s, sequential bandwidth");
  t.profile->add_option("path", t.path, "a file on that storage (at least 64 MiB to measure it)")->required();
  t.profile->add_flag("--remeasure", t.remeasure, "probe again (and replace the cached profile)");
  t.profile->add_option("--device-profile", t.device_profile, "a given profile, checked and shown");
  t.profile->add_option("--json", t.json, "write the profile as JSON here")->check(appendable);
}

int table_command::run() {
  using namespace deepwell::table;
  return errors_reported("deepwell table", [&]() -> int {
    if (gen->parsed()) {
      if (rows == 0) throw error("table gen: --rows must be at least 1");
      const auto t0 = std::chrono::steady_clock::now();
      std::atomic<uint64_t> written{0};
      ticker tick("table gen " + path, [&] {
        char b[64];
        std::snprintf(b, sizeof b, "%.1f M of %.1f M rows written", double(written.load()) / 1e6, double(rows) / 1e6);
        return std::string(b);
      });
      generate_taxi(path, {rows, seed, workers, row_group_rows, &written});
      tick.stop();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const column_file f = column_file::open(path);
      std::printf("%s: %llu trips, %zu columns, %.1f s\n", path.c_str(), (unsigned long long)f.rows(),
                  f.columns().size(), s);
      return 0;
    }
    if (profile->parsed()) {
      device_profile_options po;
      po.given = device_profile;
      po.remeasure = remeasure;
      const auto t0 = std::chrono::steady_clock::now();
      const deepwell::device_profile p = device_profile_for(path, po);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s: %.0f random reads/s of %u B (%u in flight), %.1f MiB/s in order; %s (%s), %.2f s\n",
                  p.key.empty() ? path.c_str() : p.key.c_str(), p.random_iops, p.read_bytes, p.depth,
                  p.seq_bytes_per_s / 1048576.0, p.source.c_str(), p.note.c_str(), s);
      if (!json.empty()) {
        nlohmann::json j = profile_json(p);
        j["path"] = path;
        j["seconds"] = s;
        std::ofstream(json) << j.dump() << "\n";
      }
      return 0;
    }
    const column_file f = column_file::open(path);
    if (info->parsed()) {
      std::printf("%s: %llu rows, row groups of %llu\n", path.c_str(), (unsigned long long)f.rows(),
                  (unsigned long long)f.row_group_rows());
      for (const column_info& c : f.columns())
        std::printf("  %-24s %-12s scale %d  bytes [%llu, %llu)%s\n", c.name.c_str(), type_name(c.type), c.scale,
                    (unsigned long long)c.offset, (unsigned long long)(c.offset + c.bytes),
                    c.has_stats ? "  stats" : "");
      std::printf("checksums: %s\n", f.checksummed() ? "CRC-32C a 4 KiB block, header and statistics checked"
                                                       : "none (version 1): corruption is not detected");
      if (check && f.checksummed()) {
        ticker tick("checking every block of " + path);
        f.verify("", workers);
        tick.stop();
        std::printf("check: every block matches its checksum\n");
      }
      return 0;
    }
    std::vector<int> qs = queries;
    if (qs.empty()) qs = {0, 1, 2, 3, 4, 5};
    taxi_query_options o;
    o.workers = workers;
    o.cache.odirect = odirect;
    o.direct_tier = !no_direct;
    o.cache.pollers = pollers;
    o.server = server;
    o.sparse_gather = !page_gather;
    o.cache.cache_bytes = parse_size(cache, "--cache");
    o.cache.page_size = uint32_t(parse_size(page, "--page"));
    o.route = taxi_route_mode_from(route);
    o.profile.given = device_profile;
    if (!device_profile.empty()) parse_device_profile(device_profile);  // a bad one refused before any query
    if (!cpu) require_gpu();
    int rc = 0;
    for (int q : qs) {
      o.query = q;
      ticker tick("Q" + std::to_string(q) + (cpu ? " on CPU threads" : " on the GPU"));
      const taxi_query_report r = cpu ? run_taxi_query_cpu(f, o) : run_taxi_query_gpu(f, o);
      tick.stop();
      // Q0 reads trip_distance alone: it has no net amount (nor dollars a mile) to show.
      char money[64] = "";
      if (q > 0)
        std::snprintf(money, sizeof money, ", net $%.2f, $%.4f/mi", r.result.net / 100.0,
                      taxi_dollars_per_mile(r.result));
      std::printf("Q%d %s: %llu trips >= 30 mi, %.2f mi%s; %.4f s, read %.1f MiB "
                  "(I/O amplification %.2f; tiling moves %.1f MiB)%s\n",
                  q, cpu ? "cpu" : "gpu", (unsigned long long)r.result.selected, r.result.distance / 100.0, money,
                  r.seconds, r.bytes_read / 1048576.0,
                  r.io_amplification(), r.bytes_tiling / 1048576.0,
                  r.result.failed ? (", " + std::to_string(r.result.failed) + " accesses FAILED").c_str() : "");
      for (const auto& c : r.route.columns) std::printf("  %s: %s\n", c.column.c_str(), c.why.c_str());
      if (r.route.bulk_bytes)
        std::printf("  bulk reads: %.1f MiB in %.3f s (%u threads)\n", r.route.bulk_bytes / 1048576.0,
                    r.route.bulk_read_seconds, r.route.bulk_threads);
      if (r.result.failed) rc = 1;
      if (!r.error.empty()) std::fprintf(stderr, "deepwell table: %s\n", r.error.c_str());
      std::string checked = "null";
      if (check) {
        ticker scan("Q" + std::to_string(q) + "'s plain scan for --check");
        const taxi_query_result want = taxi_reference(f, q);
        scan.stop();
        const bool same = want.selected == r.result.selected && want.distance == r.result.distance &&
                          (q == 0 || want.net == r.result.net);
        std::printf("  check against a plain scan: %s\n", same ? "equal" : "DIFFERENT");
        checked = same ? "\"equal\"" : "\"different\"";
        if (!same) rc = 1;
      }
      if (!json.empty()) {
        nlohmann::json j = {{"tool", "deepwell table query"}, {"query", q}, {"clients", cpu ? "cpu" : "gpu"},
                            {"rows", r.rows}, {"selected", r.result.selected}, {"distance", r.result.distance},
                            {"net", r.result.net}, {"seconds", r.seconds}, {"run_seconds", r.run_seconds},
                            {"route_seconds", r.route.seconds}, {"bytes_read", r.bytes_read},
                            {"bytes_needed", r.bytes_needed}, {"bytes_tiling", r.bytes_tiling}, {"misses", r.misses},
                            {"hits", r.hits}, {"failed", r.result.failed}, {"odirect", odirect},
                            {"setup_seconds", r.setup_seconds}, {"setup_cache_seconds", r.setup_cache_seconds},
                            {"direct_columns", r.direct_columns}, {"sparse_reads", r.sparse_reads}};
        j["checked"] = checked_json(check, checked == "\"equal\"");
        j["route"] = route_json(r.route);
        append_json(json, j);
      }
    }
    return rc;
  });
}

}  // namespace deepwell::tools
