// `deepwell kv` (kv_command.hpp): each verb opens the store (recovering it),
// does its batches through the store's public API, and reports.
#include "kv_command.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_checks.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "deepwell/link/server_link.hpp"
#include "gpu_probe.hpp"
#include "kv_gpu.hpp"
#include "kv_values.hpp"
#include "size_arg.hpp"

namespace deepwell::tools {

using namespace deepwell::durable;

namespace {

// The store and what serves it; members go in reverse order of teardown:
// the store, then its cache, then the link (and its controller).
struct open_store {
  std::shared_ptr<controller_link> link;
  std::shared_ptr<page_cache> cache;
  std::optional<kv_store> kv;
};

// The bucket size in a store's header, so the cache's pages can hold a
// bucket; 4096 where the file cannot tell (open then says why).
uint32_t file_bucket_bytes(const std::string& path) {
  kv_format::superblock h{};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 4096;
  const bool ok = ::pread(fd, &h, sizeof(h), 0) == ssize_t(sizeof(h));
  ::close(fd);
  if (!ok || std::memcmp(h.magic, kv_format::magic, sizeof(h.magic)) != 0) return 4096;
  return h.bucket_bytes >= 512 && h.bucket_bytes <= (64u << 10) ? h.bucket_bytes : 4096;
}

open_store open_kv(const kv_command& k, const kv_config* create) {
  if (k.gpu) {
    std::string without = command_line();  // the same command with --gpu taken out
    if (const size_t at = without.find(" --gpu"); at != std::string::npos) without.erase(at, 6);
    require_gpu(without, "");
  }
  open_store s;
  if (k.server.empty())
    s.link = embedded_link();
  else
    s.link = server_link::connect(k.server, "deepwell kv");
  cache_config cc;
  cc.page_size = std::max<uint32_t>(4096, create ? create->bucket_bytes : file_bucket_bytes(k.path));
  if (!k.cache.empty()) cc.capacity_bytes = parse_size_arg(k.cache, "--cache");
  cc.direct_files = cache_config::file_tier::never;  // the store writes: every page through the controller
  kv_options o;
  o.cpu_threads = k.threads;
  if (k.gpu) {
    s.cache = make_kv_gpu_cache(s.link, cc);
    o.executor = make_kv_gpu_executor();
  } else {
    s.cache = make_host_page_cache(s.link, cc);
  }
  if (create && !k.server.empty())  // the server's dataset as it is: a server makes no files for clients
    s.kv.emplace(kv_store::create(s.cache, s.link->open_dataset({k.path, true}), *create, o));
  else if (create)
    s.kv.emplace(kv_store::create_file(s.cache, k.path, *create, o));
  else
    s.kv.emplace(kv_store::open_file(s.cache, k.path, {}, o));
  return s;
}

int run_create(const kv_command& k) {
  struct stat st{};
  if (!k.force && k.server.empty() && ::stat(k.path.c_str(), &st) == 0)
    throw error(k.path + " exists: kv create makes a new, empty store (--force replaces the file)");
  const kv_config& c = k.shape;
  (void)kv_store::bytes_needed(c);  // a bad shape: refused before the file is touched
  open_store s = open_kv(k, &c);
  const kv_info i = s.kv->info();
  std::printf("%s: a new store of %u-byte values for about %llu keys (%llu slots in %llu buckets of %u bytes), "
              "%.1f MiB\n",
              k.path.c_str(), i.value_bytes, (unsigned long long)k.shape.capacity, (unsigned long long)i.slots,
              (unsigned long long)i.buckets, i.bucket_bytes, double(i.total_bytes) / (1 << 20));
  return 0;
}

int run_set(const kv_command& k) {
  if (k.from.empty() && k.args.size() != 2)
    throw error("kv set takes KEY VALUE, or --from FILE of 'KEY VALUE' lines (docs/kv.md, The command line)");
  if (!k.from.empty() && !k.args.empty()) throw error("kv set: give KEY VALUE or --from FILE, not both");
  open_store s = open_kv(k, nullptr);
  const kv_info i = s.kv->info();
  kv_pairs p;
  if (k.from.empty()) {
    p.keys.push_back(parse_kv_key(k.args[0]));
    p.values = parse_kv_value(k.args[1], i.value_bytes);
  } else if (k.from == "-") {
    p = read_kv_pairs(std::cin, "stdin", i.value_bytes);
  } else {
    std::ifstream in(k.from);
    if (!in) throw error("cannot read " + k.from + ": " + std::strerror(errno));
    p = read_kv_pairs(in, k.from, i.value_bytes);
  }
  // Batches of max_batch, each durable when set returns (a later batch's
  // op on a key wins over an earlier one's, as within a batch).
  uint64_t inserted = 0, updated = 0, full = 0;
  std::vector<uint8_t> status;
  for (uint64_t at = 0; at < p.keys.size(); at += i.max_batch) {
    const uint64_t n = std::min<uint64_t>(i.max_batch, p.keys.size() - at);
    status.assign(n, 0);
    const kv_batch_result r = s.kv->set(p.keys.data() + at, p.values.data() + at * i.value_bytes, n,
                                        kv_memory::host, status.data());
    inserted += r.inserted;
    updated += r.updated;
    for (uint64_t j = 0; j < n; ++j)
      if (status[j] == kv_full && ++full <= 5)
        std::fprintf(stderr, "deepwell kv set: key %llu not stored: its %u buckets are full (a store with a "
                             "larger --capacity has room)\n",
                     (unsigned long long)p.keys[at + j], i.max_probe);
  }
  std::printf("%s: set %zu pair(s): %llu new, %llu updated%s\n", k.path.c_str(), p.keys.size(),
              (unsigned long long)inserted, (unsigned long long)updated,
              full ? (", " + std::to_string(full) + " NOT STORED (full)").c_str() : "");
  return full ? 1 : 0;
}

// get and delete: the keys given, in batches; each missing key named.
int run_keys(const kv_command& k, bool erase) {
  if (k.args.empty()) throw error(std::string("kv ") + (erase ? "delete" : "get") + " needs at least one KEY");
  std::vector<uint64_t> keys;
  for (const std::string& a : k.args) keys.push_back(parse_kv_key(a));
  open_store s = open_kv(k, nullptr);
  const kv_info i = s.kv->info();
  uint64_t missing = 0, done = 0;
  std::vector<uint8_t> status, values;
  for (uint64_t at = 0; at < keys.size(); at += i.max_batch) {
    const uint64_t n = std::min<uint64_t>(i.max_batch, keys.size() - at);
    status.assign(n, 0);
    if (erase) {
      done += s.kv->erase(keys.data() + at, n, kv_memory::host, status.data()).erased;
    } else {
      values.assign(n * i.value_bytes, 0);
      s.kv->get(keys.data() + at, values.data(), n, kv_memory::host, status.data());
    }
    for (uint64_t j = 0; j < n; ++j) {
      if (status[j] == kv_not_found) {
        ++missing;
        std::fprintf(stderr, "%s not found\n", k.args[at + j].c_str());
      } else if (!erase) {
        std::printf("%llu %s\n", (unsigned long long)keys[at + j],
                    format_kv_value(values.data() + j * i.value_bytes, i.value_bytes, k.hex).c_str());
      }
    }
  }
  if (erase) std::printf("%s: deleted %llu key(s)\n", k.path.c_str(), (unsigned long long)done);
  return missing ? 1 : 0;
}

int run_info(const kv_command& k) {
  open_store s = open_kv(k, nullptr);
  const kv_info i = s.kv->info();
  const recovery_result& r = s.kv->last_recovery();
  std::printf("file          %s (%.1f MiB)\n", k.path.c_str(), double(i.total_bytes) / (1 << 20));
  std::printf("keys, values  %u bytes, %u bytes\n", i.key_bytes, i.value_bytes);
  std::printf("table         %llu buckets of %u bytes, %u slots each: %llu slots; a key in %u buckets at most\n",
              (unsigned long long)i.buckets, i.bucket_bytes, i.slots_per_bucket, (unsigned long long)i.slots,
              i.max_probe);
  std::printf("log           %u rows of 1 KiB; batches of %llu ops at most\n", i.log_rows,
              (unsigned long long)i.max_batch);
  std::printf("clients       %s\n", i.gpu ? "GPU warps" : "CPU threads (a host page cache)");
  if (i.table_checksums)
    std::printf("checksums     a CRC-32C per %u bytes of the table, checked on every read\n", i.sum_block);
  else
    std::printf("checksums     none on the table (a format-1 file)\n");
  if (r.header_copy_damaged)
    std::printf("log header    one copy failed its checksum and was rewritten%s\n",
                r.header_epoch_inferred ? " (it was the newer: its epoch's records were replayed)" : "");
  std::printf("recovery      epoch %llu -> %llu: %llu committed batch(es) replayed, %llu uncommitted discarded, "
              "%llu words written\n",
              (unsigned long long)r.epoch, (unsigned long long)r.new_epoch, (unsigned long long)r.replayed,
              (unsigned long long)r.discarded, (unsigned long long)r.elements_written);
  return 0;
}

// Every pair read from storage (contents), then looked up again through
// the table (get): a key in a wrong bucket, a duplicate, or a value that
// differs is an error.
int run_check(const kv_command& k) {
  open_store s = open_kv(k, nullptr);
  const kv_info i = s.kv->info();
  const recovery_result& rec = s.kv->last_recovery();
  std::vector<uint64_t> keys;
  std::vector<uint8_t> values;
  // Damage found once the store is open (a block failing its checksum) is
  // what a check reports: exit 1, as for a pair that does not read back.
  try {
    s.kv->contents(keys, values);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell kv check: %s\n", e.what());
    std::printf("%s: the table cannot be read whole: DAMAGED (above)\n", k.path.c_str());
    return 1;
  }
  uint64_t bad = 0;
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  for (size_t j = 1; j < sorted.size(); ++j)
    if (sorted[j] == sorted[j - 1] && ++bad <= 5)
      std::fprintf(stderr, "deepwell kv check: key %llu is in the table twice\n", (unsigned long long)sorted[j]);
  std::vector<uint8_t> status, got;
  for (uint64_t at = 0; at < keys.size(); at += i.max_batch) {
    const uint64_t n = std::min<uint64_t>(i.max_batch, keys.size() - at);
    status.assign(n, 0);
    got.assign(n * i.value_bytes, 0);
    try {
      s.kv->get(keys.data() + at, got.data(), n, kv_memory::host, status.data());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepwell kv check: looking keys up: %s\n", e.what());
      std::printf("%s: lookups fail: DAMAGED (above)\n", k.path.c_str());
      return 1;
    }
    for (uint64_t j = 0; j < n; ++j) {
      const bool same = status[j] == kv_ok &&
                        std::memcmp(got.data() + j * i.value_bytes, values.data() + (at + j) * i.value_bytes,
                                    i.value_bytes) == 0;
      if (!same && ++bad <= 5)
        std::fprintf(stderr, "deepwell kv check: key %llu is in the table but get %s\n",
                     (unsigned long long)keys[at + j], status[j] == kv_ok ? "reads another value" : "does not find it");
    }
  }
  std::printf("%s: %zu key(s) of %llu slots (%.1f%% full); recovery replayed %llu batch(es); %s\n", k.path.c_str(),
              keys.size(), (unsigned long long)i.slots, i.slots ? 100.0 * double(keys.size()) / double(i.slots) : 0.0,
              (unsigned long long)rec.replayed, bad ? "ERRORS (above)" : "every pair reads back");
  return bad ? 1 : 0;
}

}  // namespace

void add_command(CLI::App& app, kv_command& k) {
  k.app = app.add_subcommand("kv", "the persistent key-value store (docs/kv.md): create, set, get, delete, info, "
                                   "check; CPU threads by default (--gpu for the GPU)");
  k.app->require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("path", k.path, "the store's file")->required();
    c->add_flag("--gpu", k.gpu, "run the batches on the GPU (a GPU page cache)");
    c->add_option("--cache", k.cache, "page cache size (e.g. 64MiB; default DEEPWELL_CACHE_BYTES or 256MiB)");
    c->add_option("--threads", k.threads, "CPU threads (0: the cores, at most 16)");
    c->add_option("--server", k.server,
                  "a `deepwell serve` socket: the store is in its dataset PATH (its name or file), granted for "
                  "writing; kv create formats it as it is");
  };
  k.create = k.app->add_subcommand("create", "make a new, empty store (refuses an existing file unless --force)");
  common(k.create);
  k.create->add_option("--value-bytes", k.shape.value_bytes, "bytes of each value: 8 to 128, a multiple of 8")
      ->capture_default_str();
  k.create->add_option("--capacity", k.shape.capacity, "keys the table is sized for (about 75% of its slots)")
      ->capture_default_str()
      ->check(not_negative);
  k.create->add_option("--bucket-bytes", k.shape.bucket_bytes, "bucket size: a power of two, 512 to 65536")
      ->capture_default_str();
  k.create->add_option("--max-probe", k.shape.max_probe, "buckets a key may be in")->capture_default_str();
  k.create->add_option("--log-rows", k.shape.log_rows, "rows of the write-ahead log (1 KiB each)")->capture_default_str();
  k.create->add_flag("--force", k.force, "replace an existing file");
  k.set = k.app->add_subcommand("set", "store KEY VALUE, or every 'KEY VALUE' line of --from FILE ('-': stdin); "
                                       "values as text (zero-padded) or hex with 0x");
  common(k.set);
  k.set->add_option("pair", k.args, "KEY VALUE")->default_str("");
  k.set->add_option("--from", k.from, "a text file of 'KEY VALUE' lines (# comments; '-': stdin)");
  k.get = k.app->add_subcommand("get", "print 'KEY VALUE' for each key found; 'KEY not found' on stderr (exit 1)");
  common(k.get);
  k.get->add_option("keys", k.args, "keys (decimal, or hex with 0x)")->required()->default_str("");
  k.get->add_flag("--hex", k.hex, "print every value as hex, all its bytes");
  k.del = k.app->add_subcommand("delete", "delete keys; 'KEY not found' on stderr (exit 1)");
  common(k.del);
  k.del->add_option("keys", k.args, "keys (decimal, or hex with 0x)")->required()->default_str("");
  k.info = k.app->add_subcommand("info", "the store's shape and what opening it recovered");
  common(k.info);
  k.check = k.app->add_subcommand("check", "open (recover), read every pair, look each up again; exit 1 on damage found, 2 if it cannot be opened");
  common(k.check);
}

int kv_command::run() {
  try {
    if (create->parsed()) return run_create(*this);
    if (set->parsed()) return run_set(*this);
    if (get->parsed()) return run_keys(*this, false);
    if (del->parsed()) return run_keys(*this, true);
    if (info->parsed()) return run_info(*this);
    return run_check(*this);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepwell kv %s: %s\n", app->get_subcommands().front()->get_name().c_str(), e.what());
    return 2;
  }
}

}  // namespace deepwell::tools
