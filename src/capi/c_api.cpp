// The C ABI of include/deepwell/c/deepwell.h: a link (an embedded controller's,
// or a server's), one namespace and one page cache per dataset, shared by the handles opened on it; gathers and scatters of rows through rows_ref,
// by GPU kernels (cuda_shim.hpp) or CPU threads. Every entry point catches
// everything and turns it into an error code and a message.
#include "deepwell/c/deepwell.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/size_text.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/views/array.hpp"
#include "deepwell/views/rows.hpp"
#include "array_members.hpp"
#include "cache_options_c.hpp"
#include "sized_options.hpp"
#include "cuda_shim.hpp"
#include "guarded.hpp"
#include "server_links.hpp"
#include "last_error.hpp"

using namespace deepwell;

namespace deepwell::capi {

// A dataset as the C ABI serves it: its controller (through an owning
// link), namespace and cache. Arrays opened on the same file (the same
// inode, offset and length) with the same device and cache settings share
// one, so a page has one copy in the process whichever of them gathers or
// scatters it: a scatter through one is seen by a gather through another.
// (Arrays on one file with different settings have caches of their own,
// which see each other's writes only after a flush and a clear.)
// Members go in reverse order: the cache (and its queue pairs) before the
// link and the controller.
struct shared_dataset {
  std::shared_ptr<controller_link> link;  // owns an embedded controller (embed_target), or a server's
  uint32_t nsid = 0;
  bool writable = false;
  std::shared_ptr<const target> drives;   // an array of drives (its layout and members, for the route)
  std::unique_ptr<array<uint8_t>> bytes;  // holds the cache
  std::string where;                      // what it is, for messages: the file or the server's dataset
  std::string path;                       // a local file's path, and where its bytes end at open:
  uint64_t end_at_open = 0;               // a failed read then says whether the file shrank since
  // Row calls share the cache; flush, clear and close take it alone. A
  // clear beside a running gather emptied slots the gather waited on: the
  // gather ran out of pages and the clear waited out the cache's timeout.
  // (A GPU call holds it while it launches: the taker syncs the device.)
  mutable std::shared_mutex turns;
};

}  // namespace deepwell::capi

struct dw_array {
  std::shared_ptr<capi::shared_dataset> data;
  rows_ref rows{};
  int device = -1;  // -1: CPU clients
  unsigned cpu_threads = 1;
  bool writable = false;
  row_report host_report{};             // CPU clients (rows.report points at it or at gpu_report)
  row_report* gpu_report = nullptr;      // GPU clients: mapped pinned memory
  unsigned* gate = nullptr;              // GPU clients: the row kernels' gate (gpu_rows.hpp)

  ~dw_array() {  // also after a failed open
    data.reset();
    capi::gpu_report_free(gpu_report);
    capi::gpu_gate_free(gate);
  }
  page_cache& cache() const { return data->bytes->cache(); }
  // The embedded controller's counters; nothing under a server.
  std::optional<embedded_counters> counters() const { return counters_of(*data->link); }
};

namespace {

using capi::api_error;
using capi::guarded;
using capi::need;

dw_array& handle(dw_array* a) { return capi::handle_of(a, "array"); }

int code_of(request_status s) {
  switch (s.code) {
    case client_code::nvme_error:
      return DW_EIO;
    case client_code::out_of_range:
      return DW_ERANGE;
    case client_code::read_only:
      return DW_EINVAL;
    default:
      return DW_ERUNTIME;
  }
}

// A failed read or write, told with what it was on, and, where a local
// file now ends before its bytes did at open, that it was cut short under
// the array (its reads then fail: the controller sees a short transfer).
std::string shrunk_text(const capi::shared_dataset& d) {
  struct stat st{};
  if (d.path.empty() || ::stat(d.path.c_str(), &st) != 0 || uint64_t(st.st_size) >= d.end_at_open) return {};
  return "the file now holds " + std::to_string(st.st_size) + " bytes; its data ended at byte " +
         std::to_string(d.end_at_open) + " when the array was opened: it was truncated";
}

std::string failure_text(const capi::shared_dataset& d, request_status s, const std::string& op) {
  const std::string shrunk = shrunk_text(d);
  return op + " " + d.where + ": " + describe(s) + (shrunk.empty() ? "" : " (" + shrunk + ")");
}

// A file the direct tier maps, cut short under it: its lost pages read as
// zeros (a guard took the fault that would have ended the process), so
// every result since is suspect, and the array must be opened again.
void check_mapping(const dw_array& a) {
  if (!a.cache().mapped_file_cut()) return;
  const std::string shrunk = shrunk_text(*a.data);
  throw api_error(DW_EIO, a.data->where + " was cut short while mapped (" +
                              (shrunk.empty() ? std::string("truncated") : shrunk) +
                              "): reads past its new end found no data; close the array and open it again");
}

constexpr uint32_t dataset_block = 4096;  // rounding of new writable datasets (any block size up to 4 KiB)
uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::shared_ptr<target> open_target(const dw_array_options& o) {
  // Writable datasets end on a block boundary: memory and new files get
  // the few bytes past the last row that round them up (rows stay as asked).
  if (!o.path) {
    need(o.host_bytes > 0, "no path and no host_bytes: nothing to open");
    return make_host_memory_target(round_up(o.host_bytes, dataset_block), true);
  }
  file_options fo;
  fo.direct = o.cache.odirect != 0;
  fo.writable = o.writable != 0;
  fo.create = o.create != 0;
  fo.create_size = round_up(o.create_bytes, dataset_block);
  fo.offset = o.offset;
  fo.length = o.length;
  // A writable dataset of rows that end mid-block (a file create made for
  // them holds the rest of the block): the dataset runs to the block's end
  // where the file has those bytes, the rows stay as asked.
  struct stat st{};
  if (o.writable && o.length % dataset_block != 0 && o.offset <= UINT64_MAX - dataset_block &&
      o.length <= UINT64_MAX - dataset_block - o.offset &&
      stat(o.path, &st) == 0 && S_ISREG(st.st_mode) &&
      uint64_t(st.st_size) >= o.offset + round_up(o.length, dataset_block))
    fo.length = round_up(o.length, dataset_block);
  try {
    return open_file_target(o.path, fo);
  } catch (const error& e) {
    throw api_error(DW_EIO, e.what());
  }
}

// Open datasets by identity (dataset_key), for arrays to share.
std::mutex datasets_mutex;
std::map<std::string, std::weak_ptr<capi::shared_dataset>> datasets;

// Which dataset an open names, and how it is cached: the file's device and
// inode, the offset and length inside it, O_DIRECT or not, the CUDA device
// and the cache settings. Arrays opened with the same key share the
// dataset; others (another page size, say) get their own, as before.
// Empty (never shared) for host memory.
std::string dataset_key(const dw_array_options& o, const target& t) {
  if (o.layout != DW_LAYOUT_SINGLE) return capi::array_key(o);
  if (!o.path) return {};
  struct stat st{};
  if (::stat(o.path, &st) != 0) return {};
  std::string k;
  for (uint64_t v : {uint64_t(st.st_dev), uint64_t(st.st_ino), o.offset, t.size()}) k += std::to_string(v) + ":";
  return k + capi::cache_key(o.cache, true);
}

// The same for a dataset a server serves: the socket and the namespace.
std::string server_key(const dw_array_options& o, const std::string& socket, uint32_t nsid) {
  return "server:" + socket + ":" + std::to_string(nsid) + ":" + capi::cache_key(o.cache, false);
}

// CPU clients: contiguous chunks of the index array over threads, each
// thread a warp of one lane.
template <class Index>
void cpu_rows(dw_array& a, bool scatter, const Index* idx, uint64_t n, uint8_t* mem) {
  // Threads as the cache allows (each as a warp that may pin 32 pages).
  const uint64_t by_cache = std::max<uint64_t>(1, a.cache().slots() / pages_per_warp);
  const unsigned threads = unsigned(std::min<uint64_t>({a.cpu_threads, std::max<uint64_t>(1, n / 64), by_cache}));
  a.cache().check_capacity(threads);
  detail::parallel_for(n, threads, [&](unsigned, uint64_t b, uint64_t e) {
    uint8_t* at = mem + b * a.rows.row_bytes;
    if (scatter)
      a.rows.scatter(one_lane{}, idx + b, e - b, at);
    else
      a.rows.gather(one_lane{}, idx + b, e - b, at);
  });
}

int rows_call(dw_array* ap, bool scatter, const void* idx, int32_t bits, int32_t on_host, uint64_t n, void* mem,
              uintptr_t stream) {
  return guarded([&] {
    dw_array& a = handle(ap);
    need(bits == 32 || bits == 64, "index width must be 32 or 64 bits, not " + std::to_string(bits));
    need(!scatter || a.writable, "the array was opened read-only: open it writable to scatter");
    if (n == 0) return;
    need(idx != nullptr, "the index array is a null pointer");
    need(mem != nullptr, scatter ? "the source rows are a null pointer" : "the output is a null pointer");
    const std::shared_lock<std::shared_mutex> turn(a.data->turns);
    if (a.device < 0) {
      auto* m = static_cast<uint8_t*>(mem);
      if (bits == 32)
        cpu_rows(a, scatter, static_cast<const int32_t*>(idx), n, m);
      else
        cpu_rows(a, scatter, static_cast<const int64_t*>(idx), n, m);
      check_mapping(a);
      return;
    }
    const capi::device_guard g = capi::on_device(a.device);
    if (!on_host) capi::gpu_check_pointer(idx, a.device, "the index array");
    capi::gpu_check_pointer(mem, a.device, scatter ? "the source rows" : "the output");
    capi::gpu_rows(a.cache(), a.rows, a.gate, scatter, idx, bits, on_host != 0, n, mem, stream);
  });
}

// For calls that must not overlap kernels using the cache (flush, clear,
// stats, close): waits for the array's device and keeps it current until
// the returned guard ends. Nothing to do for CPU clients.
// Throws what the row calls since the last look reported (a bad index, a
// failed read or write), and forgets it. The row kernels report to
// host-visible memory: no device round trip unless something failed. The
// caller has waited for them. `mapping`: a file cut short under the direct
// tier too (sticky: not at close, where every call since has said it).
void raise_reported(dw_array& a, bool mapping = true) {
  row_report& r = *a.rows.report;
  const unsigned long long bad = __atomic_exchange_n(&r.bad, 0ull, __ATOMIC_RELAXED);
  const unsigned long long example = r.example;
  const request_status s = request_status::unpack(__atomic_exchange_n(&r.failure, 0u, __ATOMIC_RELAXED));
  if (!s.ok()) a.cache().clear_error();
  if (mapping) check_mapping(a);
  if (bad) {
    const int64_t as_signed = int64_t(example);
    throw api_error(DW_ERANGE, "index " + std::to_string(as_signed) + " is out of range for " +
                                    std::to_string(a.rows.rows) + " rows" +
                                    (bad > 1 ? " (" + std::to_string(bad) + " indices were)" : ""));
  }
  if (!s.ok()) throw api_error(code_of(s), failure_text(*a.data, s, "rows of"));
}

capi::device_guard on_idle_device(const dw_array& a) {
  if (a.device < 0) return nullptr;
  capi::device_guard g = capi::on_device(a.device);
  capi::gpu_sync_device();
  return g;
}

}  // namespace

std::string& deepwell::capi::last_error() {
  thread_local std::string message;
  return message;
}

extern "C" {

int dw_abi_version(void) { return DW_ABI_VERSION; }

int dw_parse_size(const char* text, uint64_t* bytes) {
  return guarded([&] {
    need(text && bytes, "dw_parse_size: no text or no out");
    const std::optional<uint64_t> b = parse_size(text);
    need(b.has_value(), std::string("'") + text + "' is not a size " + size_examples);
    *bytes = *b;
  });
}

int dw_check_settings(void) {
  return guarded([&] {
    try {
      (void)defaults::knobs();  // throws naming a bad variable
    } catch (const error& e) {
      throw api_error(DW_EINVAL, e.what());
    }
  });
}

int dw_set_server(const char* socket) {
  return guarded([&] {
    capi::set_server(socket);
  });
}

int dw_server_stats(char* buf, uint64_t bytes, uint64_t* needed) {
  return guarded([&] {
    const std::string server = capi::current_server();
    need(!server.empty(), "no server: call dw_set_server or set DEEPWELL_SERVER");
    const std::string text = capi::server_link_to(server)->stats();
    if (needed) *needed = text.size() + 1;
    if (buf && bytes) {
      const size_t n = std::min<uint64_t>(bytes - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = 0;
    }
  });
}

const char* dw_last_error(void) { return capi::last_error().c_str(); }

int dw_cuda_device_count(int32_t* count) {
  return guarded([&] {
    need(count != nullptr, "count is a null pointer");
    *count = capi::gpu_device_count();
  });
}

void dw_array_options_init(dw_array_options* o) {
  if (!o) return;
  capi::init_sized(o, [] { return cache_config{}; });
  o->cache_reads = 1;
}

int dw_array_open(const dw_array_options* op, dw_array** out) {
  return guarded([&] {
    need(op != nullptr && out != nullptr, "null options or output pointer");
    *out = nullptr;
    const dw_array_options o =
        capi::read_sized(op, dw_array_options_init, "dw_array_options", capi::array_options_first_size());
    capi::check_layout(o, o.layout != DW_LAYOUT_SINGLE && !capi::current_server().empty());
    need(o.row_bytes > 0, "row_bytes must be positive");
    need(!o.create || o.writable, "create needs writable");
    const cache_options co = capi::from_c(o.cache);
    capi::check(co);
    auto a = std::make_unique<dw_array>();
    a->device = co.device;
    a->writable = o.writable != 0;
    a->cpu_threads = co.cpu_threads ? co.cpu_threads : defaults::cpu_threads();

    // Server mode: the path names a dataset the server offers (its name or
    // its file's path); the server owns it and checks what we may do.
    const std::string server = o.path ? capi::current_server() : std::string();
    std::shared_ptr<server_link> link;
    std::shared_ptr<target> t;
    uint32_t server_nsid = 0;
    uint32_t server_block = 0;
    std::string where;
    uint64_t bytes = 0;
    if (!server.empty()) {
      need(!o.create, "create: the server owns its datasets (it serves " + server + "); open an existing one");
      need(o.offset == 0, "offset: the server's config sets where a dataset starts");
      link = capi::server_link_to(server);
      namespace_info ni;
      try {
        server_nsid = link->lookup(o.path);
        ni = link->info(server_nsid);
      } catch (const error& e) {
        throw api_error(DW_EINVAL, e.what());
      }
      need(!a->writable || !ni.read_only, ni.description + ": the server grants this program read access only");
      server_block = ni.block_size;
      where = "dataset " + ni.description + " (server " + server + ")";
      need(o.length <= ni.bytes, where + " has " + std::to_string(ni.bytes) + " bytes, fewer than the " +
                                     std::to_string(o.length) + " asked for");
      bytes = o.length ? o.length : ni.bytes;
    } else if (o.layout != DW_LAYOUT_SINGLE) {
      bool created = false;
      t = capi::open_array_target(o, created);
      where = t->describe();
      need(o.length <= t->size(), where + " holds " + std::to_string(t->size()) + " bytes, fewer than the length " +
                                      std::to_string(o.length) + " asked for");
      need(!o.create || o.create_bytes <= t->size(), where + " holds " + std::to_string(t->size()) +
                                                        " bytes, fewer than the " + std::to_string(o.create_bytes) +
                                                        " of the rows asked for (shape)");
      (void)created;
      bytes = o.create ? o.create_bytes : o.length ? o.length : t->size();
    } else {
      const bool created = o.path && o.create && access(o.path, F_OK) != 0;
      // create makes a missing file; one that is there is opened as it is
      // (never grown), and must hold the rows asked for.
      // (never grown), and must hold the rows asked for; its dataset is the
      // whole file, as for the file create made (rounded up to a block).
      dw_array_options as = o;
      as.create = o.path && o.create && !created ? 0 : o.create;
      t = open_target(as);
      where = t->describe();
      const uint64_t rows_bytes = o.create ? o.create_bytes : 0;
      need(rows_bytes <= t->size(), where + " holds " + std::to_string(t->size()) + " bytes, fewer than the " +
                                        std::to_string(rows_bytes) + " of the rows asked for (shape); create " +
                                        "makes a missing file and does not grow one that is there");
      // The rows asked for (memory, a file made or opened by create), else what the file holds.
      bytes = !o.path ? o.host_bytes : rows_bytes ? rows_bytes : o.length ? o.length : t->size();
    }
    need(bytes > 0, where + " is empty");
    need(bytes % o.row_bytes == 0, where + " holds " + std::to_string(bytes) + " bytes, not a whole number of rows of " +
                                       std::to_string(o.row_bytes) + " bytes");
    const cache_config cfg = co.applied_to(cache_config{});
    const uint32_t page = cfg.page_size;
    const uint32_t block = t ? std::min(page, std::max<uint32_t>(512, t->io_alignment())) : server_block;
    if (link)
      need(page % block == 0, where + " has " + std::to_string(block) + "-byte blocks: the page size (" +
                                  std::to_string(page) + ") must be a multiple of it");

    std::unique_lock<std::mutex> lock(datasets_mutex);
    const std::string key = link ? server_key(o, server, server_nsid) : dataset_key(o, *t);
    if (!key.empty()) {
      auto it = datasets.find(key);
      if (it != datasets.end()) {
        std::shared_ptr<capi::shared_dataset> d = it->second.lock();
        // A read-only dataset cannot take scatters: a writable open gets its own.
        if (d && (d->writable || !a->writable)) a->data = std::move(d);
      }
    }
    if (!a->data) {
      auto d = std::make_shared<capi::shared_dataset>();
      d->writable = a->writable;
      if (link) {
        d->link = link;
        d->nsid = server_nsid;
      } else {
        embedded_namespace e = embed_target(t, block, !a->writable, capi::controller_of(co));
        d->link = std::move(e.link);
        d->nsid = e.nsid;
        if (o.layout != DW_LAYOUT_SINGLE) d->drives = t;
      }

      const std::shared_ptr<page_cache> cache = capi::cache_on(a->device, d->link, cfg);
      d->bytes = std::make_unique<array<uint8_t>>(cache, d->nsid);
      d->where = where;
      if (!link && o.path && o.layout == DW_LAYOUT_SINGLE) {
        d->path = o.path;
        d->end_at_open = o.offset + t->size();
      }
      a->data = d;
      if (!key.empty()) datasets[key] = d;
    }
    lock.unlock();
    if (a->device >= 0) {
      const capi::device_guard g = capi::on_device(a->device);
      a->gpu_report = capi::gpu_report_alloc();
      a->gate = capi::gpu_gate_alloc();
    }
    page_cache& cache = a->cache();
    need(a->data->bytes->size() >= bytes, where + " is shared with an array of " +
                                              std::to_string(a->data->bytes->size()) + " bytes");
    a->rows.bytes = a->data->bytes->ref();
    a->rows.bytes.read_only = !a->writable;  // a read-only handle on a shared writable dataset
    a->rows.rows = bytes / o.row_bytes;
    a->rows.row_bytes = o.row_bytes;
    a->rows.report = a->device >= 0 ? a->gpu_report : &a->host_report;
    // Gathers read rows in place (cache_reads off) where the direct tier
    // has them. A writable dataset qualifies only in host memory, and then
    // scatters write rows in place too: a row scattered through the cache
    // could be dirty there, newer than the memory the gathers read (reads
    // see every write made before them). Writable files are read through
    // the cache.
    if (!o.cache_reads) {
      const uint8_t* direct = cache.dataset(a->rows.bytes.dataset).source.mapped();
      if (!a->writable) {
        a->rows.in_place = direct;
      } else if (direct && !o.path) {
        a->rows.in_place = direct;
        a->rows.in_place_writes = true;
      }
    }
    *out = a.release();
  });
}

int dw_array_close(dw_array* a) {
  if (!a) return DW_OK;
  std::unique_ptr<dw_array> owned(a);
  int rc = guarded([&] {
    const std::unique_lock<std::shared_mutex> turn(a->data->turns);
    const auto g = on_idle_device(*a);
    if (a->writable) {
      const request_status s = a->cache().flush();
      if (!s.ok()) throw api_error(code_of(s), failure_text(*a->data, s, "flush at close of"));
    }
    raise_reported(*a, false);  // what unchecked calls left unsaid
  });
  const int freed = guarded([&] {
    const capi::device_guard g = capi::on_device(a->device);
    owned.reset();  // with the array's device current
  });
  return rc != DW_OK ? rc : freed;
}

int dw_array_info_get(const dw_array* ap, dw_array_info* info) {
  return guarded([&] {
    const dw_array& a = handle(const_cast<dw_array*>(ap));
    need(info != nullptr, "info is a null pointer");
    std::memset(info, 0, sizeof(*info));
    info->rows = a.rows.rows;
    info->row_bytes = a.rows.row_bytes;
    info->page_size = a.cache().page_size();
    info->cache_pages = a.cache().slots();
    info->cache_bytes = uint64_t(a.cache().slots()) * a.cache().page_size();
    info->device = a.device;
    info->writable = a.writable;
    info->direct_tier = a.cache().dataset(a.rows.bytes.dataset).source.mapped() != nullptr;
    info->in_place = a.rows.in_place != nullptr;
    const auto k = a.counters();
    std::strncpy(info->backend, k ? k->backend.c_str() : "server", sizeof(info->backend) - 1);
    std::string route = a.cache().route(a.rows.bytes.dataset);
    if (a.data->drives) route += ", over a " + a.data->drives->describe();
    std::strncpy(info->route, route.c_str(), sizeof(info->route) - 1);
  });
}

int dw_array_gather(dw_array* a, const void* idx, int32_t bits, int32_t on_host, uint64_t n, void* out, uintptr_t stream) {
  return rows_call(a, false, idx, bits, on_host, n, out, stream);
}

int dw_array_scatter(dw_array* a, const void* idx, int32_t bits, int32_t on_host, uint64_t n, const void* src,
               uintptr_t stream) {
  return rows_call(a, true, idx, bits, on_host, n, const_cast<void*>(src), stream);
}

int dw_array_check(dw_array* ap, uintptr_t stream) {
  return guarded([&] {
    dw_array& a = handle(ap);
    if (a.device >= 0) {
      const capi::device_guard g = capi::on_device(a.device);
      try {
        capi::gpu_sync_stream(stream);
      } catch (const error& e) {
        throw api_error(DW_ERUNTIME, e.what());
      }
    }
    raise_reported(a);
  });
}

int dw_array_flush(dw_array* ap) {
  return guarded([&] {
    dw_array& a = handle(ap);
    need(a.writable, "the array was opened read-only: nothing to flush");
    const std::unique_lock<std::shared_mutex> turn(a.data->turns);
    const auto g = on_idle_device(a);
    const request_status s = a.cache().flush();
    if (!s.ok()) throw api_error(code_of(s), failure_text(*a.data, s, "flush of"));
    // An unchecked scatter that failed (check=False) made rows this flush
    // does not hold: said here, not lost.
    raise_reported(a);
  });
}

int dw_array_clear(dw_array* ap) {
  return guarded([&] {
    dw_array& a = handle(ap);
    const std::unique_lock<std::shared_mutex> turn(a.data->turns);
    const auto g = on_idle_device(a);
    const request_status s = a.cache().clear();
    if (!s.ok()) throw api_error(code_of(s), failure_text(*a.data, s, "clear of"));
  });
}

int dw_array_stats_get(dw_array* ap, dw_stats* out) {
  return guarded([&] {
    dw_array& a = handle(ap);
    need(out != nullptr, "stats is a null pointer");
    const auto g = on_idle_device(a);
    const cache_stats s = a.cache().stats();
    // With a server, its counters are the server's (`deepwell stat`).
    const auto k = a.counters();
    const queue_counters q = k ? k->totals : queue_counters{};
    const double cpu = k ? k->poller_cpu_seconds : 0.0;
    *out = dw_stats{s.accesses,   s.hits,          s.misses,       s.evictions, s.writebacks,
                    s.bytes_read, s.bytes_written, s.direct_fills, q.reads,     q.bytes_read,
                    q.writes,     q.bytes_written, cpu,           s.tier_fills, s.tier_retries};
  });
}

int dw_array_stats_reset(dw_array* ap) {
  return guarded([&] {
    dw_array& a = handle(ap);
    const auto g = on_idle_device(a);
    a.cache().reset_stats();
  });
}

}  // extern "C"
