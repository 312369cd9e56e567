// The C ABI's key-value store (include/deepwell/c/deepwell.h, dw_kv_*): a
// file with its own controller in this process, or, in server mode
// (dw_set_server, DEEPWELL_SERVER), a dataset the server grants for
// writing; a page cache (on a GPU, or a host cache for CPU threads) on
// that link, and a durable::kv_store on them. Every entry point catches
// everything and turns it into an error code and a message (dw_last_error),
// as c_api.cpp does.
//
// GPU stores need the GPU support of deepwell_cuda (gpu_kv_support,
// src/durable/kv_kernels.cu); a build defines DEEPWELL_C_CUDA where
// libdeepwell_c.so links it. Without it, device >= 0 answers DW_ENOCUDA.
#include "deepwell/c/deepwell.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <new>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "cuda_shim.hpp"
#include "cache_options_c.hpp"
#include "sized_options.hpp"
#include "store_handle.hpp"
#include "guarded.hpp"
#include "server_links.hpp"
#include "last_error.hpp"

using namespace deepwell;
using namespace deepwell::durable;

struct dw_kv : capi::store_handle<kv_store> {};

namespace {

using capi::guarded;
using capi::need;

constexpr const char* kind = "key-value store";
dw_kv& handle(dw_kv* k) { return capi::handle_of(k, kind); }

std::shared_ptr<kv_executor> gpu_support(int device) {
  return capi::gpu_part(device, "key-value stores", [] { return gpu_kv_support(); });
}

capi::device_guard on_device(const dw_kv& k) { return capi::on_device(k.device); }

void fill(dw_kv_result* out, const kv_batch_result& r) {
  if (!out) return;
  // Every field named in the struct's order (the compiler checks it); the
  // rest, if deepwell.h grows, zero.
  *out = dw_kv_result{.ops = r.ops, .inserted = r.inserted, .updated = r.updated, .erased = r.erased,
                      .found = r.found, .not_found = r.not_found, .full = r.full, .bad_key = r.bad_key,
                      .superseded = r.superseded, .log_rows = r.log_rows, .checkpointed = r.checkpointed ? 1 : 0};
}

kv_memory where(int32_t on_device) { return on_device ? kv_memory::device : kv_memory::host; }

// The bucket size in a store's header (for the cache's default page), or
// 4096 if the file cannot tell (open then reports why).
uint32_t file_bucket_bytes(const char* path) {
  kv_format::superblock h{};
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not wait: open names it
  if (fd < 0) return 4096;
  const bool ok = ::pread(fd, &h, sizeof(h), 0) == ssize_t(sizeof(h));
  ::close(fd);
  if (!ok || std::memcmp(h.magic, kv_format::magic, sizeof(h.magic)) != 0) return 4096;
  return h.bucket_bytes >= 512 && h.bucket_bytes <= (64u << 10) ? h.bucket_bytes : 4096;
}

// A dataset the server grants for writing, by name or path.
uint32_t open_granted(controller_link& link, const char* name) {
  try {
    return link.open_dataset({name, true});
  } catch (const error& e) {
    throw capi::api_error(DW_EIO, e.what());
  }
}

// A KV store's cache before the caller's settings: a store is written in
// place, so no mapping of its file.
cache_config kv_cache_base() {
  cache_config c;
  c.direct_files = cache_config::file_tier::never;
  return c;
}

// A batch call's steps around the store's own: the handle, memory the
// store can reach, its device current, the counts into the result.
template <class Op>
int batch(dw_kv* kp, int32_t on_dev, dw_kv_result* result, Op&& op) {
  return guarded([&] {
    dw_kv& k = handle(kp);
    need(!on_dev || k.device >= 0, "device memory given to a store on the host (device -1)");
    const std::lock_guard<std::mutex> one(k.calls);
    const auto g = on_device(k);
    fill(result, op(*k.store, where(on_dev)));
  });
}

}  // namespace

extern "C" {

void dw_kv_options_init(dw_kv_options* o) {
  if (!o) return;
  capi::init_sized(o, [] { return kv_cache_base(); });
  o->mode = DW_KV_OPEN;
  // The page follows the store's buckets, known at open: 0 here.
  o->cache.page_size = 0;
}

int dw_kv_bytes_needed(uint32_t value_bytes, uint64_t capacity, uint32_t bucket_bytes, uint32_t log_rows,
                       uint64_t* bytes) {
  return guarded([&] {
    need(bytes != nullptr, "bytes is a null pointer");
    kv_config c;
    c.value_bytes = value_bytes;
    if (capacity) c.capacity = capacity;
    if (bucket_bytes) c.bucket_bytes = bucket_bytes;
    if (log_rows) c.log_rows = log_rows;
    *bytes = kv_store::bytes_needed(c);
  });
}

int dw_kv_open(const dw_kv_options* op, dw_kv** out) {
  return guarded([&] {
    const dw_kv_options o =
        capi::read_open_options(op, out, dw_kv_options_init, "dw_kv_options", "DW_KV_OPEN", "DW_KV_CREATE");
    const cache_options co = capi::from_c(o.cache);
    capi::check(co);
    const bool create = o.mode == DW_KV_CREATE;
    kv_config cfg;
    if (create) {
      need(o.value_bytes != 0, "creating a store needs value_bytes (8 to 128, a multiple of 8)");
      cfg.value_bytes = o.value_bytes;
      if (o.capacity) cfg.capacity = o.capacity;
      if (o.bucket_bytes) cfg.bucket_bytes = o.bucket_bytes;
      if (o.max_probe) cfg.max_probe = o.max_probe;
      if (o.log_rows) cfg.log_rows = o.log_rows;
      (void)kv_store::bytes_needed(cfg);  // a bad configuration: an error before the file is touched
    }

    auto k = std::make_unique<dw_kv>();
    k->device = co.device;
    const std::string server = capi::current_server();
    if (!server.empty()) {
      k->link = capi::server_link_to(server);
    } else {
      k->link = embedded_link(capi::controller_of(co));
    }
    // The page holds a bucket: an existing store's (from its header, where
    // this process may read the file) or the new one's.
    cache_config base = kv_cache_base();
    base.page_size = std::max<uint32_t>(base.page_size, create ? cfg.bucket_bytes : file_bucket_bytes(o.path));
    const cache_config cfgc = co.applied_to(base);
    kv_options ko;
    if (o.max_batch) ko.max_batch = o.max_batch;
    ko.cpu_threads = co.cpu_threads;
    ko.direct = co.odirect;
    const auto g = on_device(*k);
    k->cache = capi::cache_on(k->device, k->link, cfgc);
    if (k->device >= 0) ko.executor = gpu_support(k->device);
    if (create && !server.empty())  // the server's dataset, as it is (a server makes no files for clients)
      k->store = std::make_unique<kv_store>(kv_store::create(k->cache, open_granted(*k->link, o.path), cfg, ko));
    else if (create)
      k->store = std::make_unique<kv_store>(kv_store::create_file(k->cache, o.path, cfg, ko));
    else
      k->store = std::make_unique<kv_store>(
          kv_store::open_file(k->cache, o.path, kv_expect{0, o.value_bytes}, ko));
    *out = k.release();
  });
}

int dw_kv_close(dw_kv* k) {
  if (!k) return DW_OK;
  // A checkpoint first, so that the next open has nothing to replay; the
  // handle is freed whatever it returns.
  std::unique_ptr<dw_kv> owned(k);
  return guarded([&] {
    const auto g = on_device(*owned);
    if (owned->store) owned->store->checkpoint();
    owned.reset();
  });
}

int dw_kv_info_get(dw_kv* kp, dw_kv_info* info) {
  return guarded([&] {
    need(info != nullptr, "info is a null pointer");
    dw_kv& k = handle(kp);
    const kv_info i = k.store->info();
    const auto& recovery = k.store->last_recovery();
    *info = dw_kv_info{.key_bytes = i.key_bytes, .value_bytes = i.value_bytes, .bucket_bytes = i.bucket_bytes,
                       .slots_per_bucket = i.slots_per_bucket, .max_probe = i.max_probe, .log_rows = i.log_rows,
                       .buckets = i.buckets, .slots = i.slots, .file_bytes = i.total_bytes,
                       .max_batch = i.max_batch, .device = k.device, .recovered_batches = recovery.replayed,
                       .batches = k.store->batches(), .checkpoints = k.store->checkpoints(),
                       .table_checksums = i.table_checksums ? 1 : 0,
                       .header_copy_damaged = recovery.header_copy_damaged ? 1 : 0};
  });
}

int dw_kv_set(dw_kv* kp, const uint64_t* keys, const void* values, uint64_t n, int32_t on_dev, uint8_t* status,
              dw_kv_result* result) {
  return batch(kp, on_dev, result, [&](kv_store& s, kv_memory w) { return s.set(keys, values, n, w, status); });
}

int dw_kv_get(dw_kv* kp, const uint64_t* keys, void* values, uint64_t n, int32_t on_dev, uint8_t* status,
              dw_kv_result* result) {
  return batch(kp, on_dev, result, [&](kv_store& s, kv_memory w) { return s.get(keys, values, n, w, status); });
}

int dw_kv_delete(dw_kv* kp, const uint64_t* keys, uint64_t n, int32_t on_dev, uint8_t* status, dw_kv_result* result) {
  return batch(kp, on_dev, result, [&](kv_store& s, kv_memory w) { return s.erase(keys, n, w, status); });
}

int dw_kv_checkpoint(dw_kv* kp) {
  return capi::forward_to_store(kp, kind, [](kv_store& s) { s.checkpoint(); });
}

}  // extern "C"
