// The C ABI's checkpoints (include/deepwell/c/deepwell.h, dw_checkpoint_*):
// a file with its own controller in this process, or, in server mode
// (dw_set_server, DEEPWELL_SERVER), a dataset the server grants; a page
// cache on that link (on a GPU, or a host cache for CPU threads), and a
// checkpoint_store on them. Every entry point
// catches everything and turns it into an error code and a message
// (dw_last_error), as c_api.cpp does.
//
// GPU checkpoints need the GPU support of deepwell_cuda
// (gpu_checkpoint_support, src/durable/checkpoint_kernels.cu); a build defines
// DEEPWELL_C_CUDA where libdeepwell_c.so links it. Without it, device >= 0
// answers DW_ENOCUDA.
#include "deepwell/c/deepwell.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/checkpoint.hpp"
#include "cuda_shim.hpp"
#include "cache_options_c.hpp"
#include "sized_options.hpp"
#include "store_handle.hpp"
#include "guarded.hpp"
#include "server_links.hpp"
#include "last_error.hpp"

using namespace deepwell;

struct dw_checkpoint : capi::store_handle<checkpoint_store> {};

namespace {

using capi::api_error;
using capi::guarded;
using capi::need;

constexpr const char* kind = "checkpoint";
dw_checkpoint& handle(dw_checkpoint* c) { return capi::handle_of(c, kind); }

checkpoint_manifest to_manifest(const dw_checkpoint_tensor* t, uint32_t n) {
  need(n == 0 || t != nullptr, "the manifest is a null pointer");
  checkpoint_manifest m(n);
  for (uint32_t i = 0; i < n; ++i) {
    need(t[i].name != nullptr, "tensor " + std::to_string(i) + " of the manifest has no name");
    need(t[i].ndim >= 0 && t[i].ndim <= 32, "tensor '" + std::string(t[i].name) + "' has " + std::to_string(t[i].ndim) +
                                                " dimensions (0 to 32)");
    need(t[i].ndim == 0 || t[i].shape != nullptr, "tensor '" + std::string(t[i].name) + "' has a null shape");
    m[i].name = t[i].name;
    m[i].dtype = t[i].dtype ? t[i].dtype : "";
    m[i].bytes = t[i].bytes;
    m[i].shape.assign(t[i].shape, t[i].shape + t[i].ndim);
  }
  return m;
}

std::shared_ptr<checkpoint_gpu> gpu_support(int device) {
  return capi::gpu_part(device, "checkpoints", [] { return gpu_checkpoint_support(); });
}

capi::device_guard on_device(const dw_checkpoint& c) { return capi::on_device(c.device); }

checkpoint_buffers buffers(const dw_checkpoint& c, void* const* data, const int32_t* on_dev, uint32_t n, bool load) {
  const checkpoint_manifest& m = c.store->manifest();
  need(n == m.size(), std::string(load ? "load" : "save") + ": " + std::to_string(n) + " buffers given; the store has " +
                          std::to_string(m.size()));
  need(n == 0 || data != nullptr, "the buffer array is a null pointer");
  checkpoint_buffers out;
  for (uint32_t i = 0; i < n; ++i) {
    if (load && !data[i]) continue;  // not loaded
    out[m[i].name] = {data[i], m[i].bytes, on_dev && on_dev[i] ? memory_kind::device : memory_kind::host};
  }
  return out;
}

// An empty file cannot hold a store: an I/O error naming it (a file that
// is not a store), before the namespace machinery refuses it as an argument.
void refuse_empty_file(const char* path) {
  struct stat st{};
  if (::stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
    throw api_error(DW_EIO, std::string("checkpoint store '") + path +
                                "': the file is empty (0 bytes): not a deepwell checkpoint store");
}

// A checkpoint store's cache before the caller's settings: large pages,
// fewer queue pairs and entries (defaults.hpp says why), no file mapping.
cache_config checkpoint_cache_base(bool gpu) {
  cache_config c;
  c.page_size = defaults::builtin::checkpoint_page_size;
  c.queue_pairs = gpu ? defaults::builtin::checkpoint_gpu_queue_pairs : defaults::builtin::checkpoint_cpu_queue_pairs;
  c.queue_entries = defaults::builtin::checkpoint_queue_entries;
  c.direct_files = cache_config::file_tier::never;
  return c;
}

}  // namespace

extern "C" {

void dw_checkpoint_options_init(dw_checkpoint_options* o) {
  if (!o) return;
  // Shown for a host cache; a GPU's queue pairs are 0 here (its default).
  capi::init_sized(o, [] { return checkpoint_cache_base(false); });
  o->cache.queue_pairs = 0;
  o->mode = DW_CHECKPOINT_OPEN;
  o->writable = 1;
}

int dw_checkpoint_bytes_needed(const dw_checkpoint_tensor* manifest, uint32_t n, uint32_t unit, uint64_t* bytes) {
  return guarded([&] {
    need(bytes != nullptr, "bytes is a null pointer");
    *bytes = checkpoint_store::bytes_needed(to_manifest(manifest, n), unit ? unit : 65536);
  });
}

int dw_checkpoint_open(const dw_checkpoint_options* op, const dw_checkpoint_tensor* manifest, uint32_t n,
                       dw_checkpoint** out) {
  return guarded([&] {
    const dw_checkpoint_options o = capi::read_open_options(op, out, dw_checkpoint_options_init, "dw_checkpoint_options",
                                                            "DW_CHECKPOINT_OPEN", "DW_CHECKPOINT_CREATE");
    const cache_options co = capi::from_c(o.cache);
    capi::check(co);
    const bool create = o.mode == DW_CHECKPOINT_CREATE;
    need(!create || o.writable, "creating a store needs writable");
    need(!create || manifest != nullptr || n == 0, "creating a store needs a manifest");
    const checkpoint_manifest m = to_manifest(manifest, n);
    const cache_config cfg = co.applied_to(checkpoint_cache_base(co.device >= 0));
    const uint32_t page = cfg.page_size;
    const uint32_t unit = o.unit ? o.unit : page;

    auto c = std::make_unique<dw_checkpoint>();
    c->device = co.device;
    uint32_t nsid = 0;
    const std::string server = capi::current_server();
    if (!server.empty()) {
      // A dataset the server grants (by name or path), as it is: a server
      // makes no files for its clients, so a new store needs one big enough.
      c->link = capi::server_link_to(server);
      try {
        nsid = c->link->open_dataset({o.path, o.writable != 0});
      } catch (const error& e) {
        throw api_error(DW_EIO, e.what());
      }
    } else {
      if (create) {
        const uint64_t bytes = checkpoint_store::bytes_needed(m, unit);
        struct stat st{};
        if (::stat(o.path, &st) != 0) {
          const int fd = ::open(o.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
          if (fd < 0) throw api_error(DW_EIO, errno_message(std::string("creating ") + o.path, errno));
          ::close(fd);
          st.st_mode = S_IFREG;
          st.st_size = 0;
        }
        if (S_ISREG(st.st_mode) && uint64_t(st.st_size) < bytes && ::truncate(o.path, off_t(bytes)) != 0)
          throw api_error(DW_EIO, errno_message(std::string("growing ") + o.path, errno));
        // Its blocks reserved now, as a kv store's: a disk without room for
        // the store says so here, not in the middle of a save. File systems
        // that cannot reserve keep the sparse file.
        if (S_ISREG(st.st_mode)) {
          const int fd = ::open(o.path, O_WRONLY | O_CLOEXEC);
          const int r = fd >= 0 ? ::fallocate(fd, 0, 0, off_t(bytes)) : -1;
          const int err = fd < 0 || r == 0 ? 0 : errno;
          if (fd >= 0) ::close(fd);
          if (err && err != EOPNOTSUPP && err != ENOSYS)
            throw api_error(DW_EIO, errno_message(std::string("reserving the ") + std::to_string(bytes) +
                                                      " bytes of checkpoint store " + o.path,
                                                  err) +
                                        (err == ENOSPC ? " (the disk has no room for the store)" : ""));
        }
      } else {
        refuse_empty_file(o.path);
      }
      c->link = embedded_link(capi::controller_of(co));
      const uint32_t block = std::min(page, co.odirect ? 4096u : 512u);
      try {
        nsid = c->link->open_dataset({o.path, o.writable != 0, co.odirect, block});
      } catch (const error& e) {
        throw api_error(DW_EIO, e.what());
      }
    }
    checkpoint_options store_options;
    store_options.label = o.path;
    store_options.threads = co.cpu_threads;
    store_options.unit = unit;
    store_options.allow_older = o.allow_older != 0;
    const auto g = on_device(*c);
    c->cache = capi::cache_on(c->device, c->link, cfg);
    if (c->device >= 0) store_options.gpu = gpu_support(c->device);
    if (create)
      c->store = checkpoint_store::create(c->cache, nsid, m, store_options);
    else if (manifest || n)
      c->store = checkpoint_store::open(c->cache, nsid, m, store_options);
    else
      c->store = checkpoint_store::open(c->cache, nsid, store_options);
    *out = c.release();
  });
}

int dw_checkpoint_close(dw_checkpoint* c) { return capi::close_handle(c); }

int dw_checkpoint_generation(dw_checkpoint* c, uint64_t* generation) {
  return guarded([&] {
    need(generation != nullptr, "generation is a null pointer");
    *generation = handle(c).store->generation();
  });
}

int dw_checkpoint_count(dw_checkpoint* c, uint32_t* n) {
  return guarded([&] {
    need(n != nullptr, "n is a null pointer");
    *n = uint32_t(handle(c).store->manifest().size());
  });
}

int dw_checkpoint_tensor_at(dw_checkpoint* c, uint32_t i, dw_checkpoint_tensor* out) {
  return guarded([&] {
    need(out != nullptr, "out is a null pointer");
    const checkpoint_manifest& m = handle(c).store->manifest();
    need(i < m.size(), "tensor " + std::to_string(i) + " of " + std::to_string(m.size()));
    out->name = m[i].name.c_str();
    out->dtype = m[i].dtype.c_str();
    out->shape = m[i].shape.empty() ? nullptr : m[i].shape.data();
    out->ndim = int32_t(m[i].shape.size());
    out->bytes = m[i].bytes;
  });
}

int dw_checkpoint_save(dw_checkpoint* cp, void* const* data, const int32_t* on_dev, uint32_t n,
                       dw_checkpoint_save_info* info) {
  return guarded([&] {
    dw_checkpoint& c = handle(cp);
    const checkpoint_buffers b = buffers(c, data, on_dev, n, false);
    const std::lock_guard<std::mutex> one(c.calls);
    const auto g = on_device(c);
    const save_report r = c.store->save(b);
    if (info)
      *info = dw_checkpoint_save_info{.generation = r.generation, .data_bytes = r.data_bytes,
                                      .bytes_written = r.bytes_written, .units_written = r.units_written,
                                      .units_total = r.units_total, .incremental = r.incremental,
                                      .slot = int32_t(r.slot), .seconds = r.seconds};
  });
}

int dw_checkpoint_load(dw_checkpoint* cp, void* const* data, const int32_t* on_dev, uint32_t n, int32_t verify_first) {
  return guarded([&] {
    dw_checkpoint& c = handle(cp);
    const checkpoint_buffers b = buffers(c, data, on_dev, n, true);
    const std::lock_guard<std::mutex> one(c.calls);
    const auto g = on_device(c);
    load_options lo;
    lo.verify_first = verify_first != 0;
    lo.partial = b.size() < c.store->manifest().size();
    c.store->load(b, lo);
  });
}

int dw_checkpoint_verify(dw_checkpoint* cp) {
  return capi::forward_to_store(cp, kind, [](checkpoint_store& s) { s.verify(); });
}

}  // extern "C"
