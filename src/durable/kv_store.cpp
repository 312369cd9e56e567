// The key-value store's host side (include/deepwell/durable/kv_store.hpp):
// the header, the three namespaces over one storage target, scratch memory,
// the batch protocol's host steps, CPU threads as the executor of a host
// cache (a GPU cache runs the same phases as kernels: src/durable/kv_kernels.cu).
#include "deepwell/durable/kv_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/targets/checksummed_target.hpp"
#include "common/disk_header.hpp"
#include "common/file_io.hpp"
#include "common/unique_fd.hpp"

namespace deepwell::durable {

namespace {

namespace kf = kv_format;

constexpr uint64_t io_chunk = 64 << 10;

uint32_t header_checksum(const kf::superblock& h) { return detail::sealed_sum(h, 0x6A09E667F3BCC908ull); }

bool pow2(uint64_t v) { return v && (v & (v - 1)) == 0; }
uint64_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The header a configuration gives (no magic, nonce or checksum yet).
// Throws deepwell::error naming the bad setting.
kf::superblock layout(const kv_config& c) {
  auto bad = [](const std::string& m) { throw error("kv store: " + m); };
  if (c.value_bytes < kf::min_value_bytes || c.value_bytes > kf::max_value_bytes || c.value_bytes % 8)
    bad("values of " + std::to_string(c.value_bytes) + " bytes: 8 to 128, a multiple of 8");
  if (!pow2(c.bucket_bytes) || c.bucket_bytes < 512 || c.bucket_bytes > (64u << 10))
    bad("buckets of " + std::to_string(c.bucket_bytes) + " bytes: a power of two, 512 B to 64 KiB");
  if (c.log_rows < 2 || c.log_rows > (1u << 24)) bad(std::to_string(c.log_rows) + " log rows: 2 to 16M");
  if (c.max_probe == 0) bad("max_probe 0: at least 1");
  kf::superblock h{};
  h.version = kf::version;
  h.key_bytes = kf::key_bytes;
  h.value_bytes = c.value_bytes;
  h.slot_words = 1 + c.value_bytes / 8;
  h.bucket_bytes = c.bucket_bytes;
  h.slots_per_bucket = c.bucket_bytes / (8 * h.slot_words);
  if (h.slots_per_bucket == 0)
    bad("buckets of " + std::to_string(c.bucket_bytes) + " bytes hold no slot of " + std::to_string(8 * h.slot_words) +
        " bytes");
  // A table of at most 2^50 bytes (1 PiB): the layout's sums never wrap.
  constexpr uint64_t max_table_bytes = uint64_t(1) << 50;
  if (c.buckets)
    h.buckets = c.buckets;
  else {
    if (c.capacity == 0) bad("capacity 0 and no bucket count");
    if (c.capacity > max_table_bytes / (8 * h.slot_words))
      bad("capacity " + std::to_string(c.capacity) + " (its table would pass " + std::to_string(max_table_bytes) +
          " bytes)");
    const double per_bucket = 0.75 * h.slots_per_bucket;
    h.buckets = std::max<uint64_t>(1, uint64_t(double(c.capacity) / per_bucket + 0.999999));
  }
  if (h.buckets > max_table_bytes / h.bucket_bytes)
    bad(std::to_string(h.buckets) + " buckets of " + std::to_string(h.bucket_bytes) + " bytes (a table past " +
        std::to_string(max_table_bytes) + " bytes)");
  h.max_probe = uint32_t(std::min<uint64_t>(c.max_probe, h.buckets));
  h.log_rows = c.log_rows;
  h.table_offset = kf::header_bytes;
  h.table_bytes = h.buckets * h.bucket_bytes;
  h.log_offset = kf::round_up(h.table_offset + h.table_bytes, log_format::region_align);
  h.log_bytes = log_format::log_bytes(1, h.log_rows);
  if (!c.table_checksums) {  // format 1: no sums region
    h.version = 1;
    h.total_bytes = h.log_offset + h.log_bytes;
    return h;
  }
  // The table's checksums: a block is a bucket, or 4 KiB of a larger one.
  h.sum_block = uint32_t(std::min<uint64_t>(4096, h.bucket_bytes));
  h.sums_offset = h.log_offset + h.log_bytes;
  h.sums_bytes = kf::round_up(checksum_region_bytes(h.table_bytes, h.sum_block), log_format::region_align);
  h.total_bytes = h.sums_offset + h.sums_bytes;
  return h;
}

// A batch's counts into its result (the counters start at zero each batch,
// and each phase counts only its own outcomes).
void take_counts(kv_batch_result& r, const kv_detail::counters& c) { static_cast<kv_op_counts&>(r) = c.ops; }

// A CPU thread as a warp of one lane, on a queue of its own.
struct cpu_lane : one_lane {
  uint32_t q = 0;
  uint32_t queue_hint() const { return q; }
};

}  // namespace

struct kv_store::impl {
  detail::unique_fd owner;  // a store file's: its exclusive flock, held while the store is open
  std::shared_ptr<page_cache> cache;
  uint32_t dataset = 0;  // the storage: a namespace of the cache's link
  namespace_info storage;
  kv_options opts;
  std::string name;
  kf::superblock sb{};
  uint32_t block = 4096;
  uint32_t sb_ns = 0, table_ns = 0, log_ns = 0;
  std::unique_ptr<host_queue_client> io;
  std::unique_ptr<array<uint64_t>> table;
  bool table_checked = false;  // false for a version-1 file
  std::unique_ptr<write_ahead_log> log;
  std::shared_ptr<kv_executor> gpu;  // the executor; null: CPU threads, one lane each
  uint32_t lanes = 1;
  unsigned threads = 1;
  recovery_result recovered{};
  uint32_t tail = 0;  // the log partition's next row (this epoch)
  uint64_t txid = 1;
  uint64_t batches = 0, checkpoints = 0;
  uint64_t errors_at_batch = 0;  // the cache's error count when the batch began
  bool broken = false;
  std::string broken_why;

  // Scratch (the executor's memory).
  uint64_t max_batch = 0, table_mask = 0;
  std::vector<void*> allocations;
  uint64_t* keys_in = nullptr;
  uint64_t* values_in = nullptr;
  uint8_t* ops_in = nullptr;
  uint8_t* status = nullptr;
  uint64_t* dedup_keys = nullptr;
  uint32_t* dedup_win = nullptr;
  uint64_t* claims = nullptr;
  kv_detail::counters* count = nullptr;
  // The stage (made at the first stage() call).
  uint64_t* st_keys = nullptr;
  uint64_t* st_values = nullptr;
  uint8_t* st_ops = nullptr;
  unsigned long long* st_count = nullptr;

  ~impl() {
    log.reset();
    table.reset();
    io.reset();
    for (void* p : allocations) release(p);
  }

  [[noreturn]] void fail(const std::string& what) const { throw error(name + ": " + what); }
  [[noreturn]] void fail_io(const std::string& what) const { throw kv_io_error(name + ": " + what); }

  // ---- executor memory ----
  void* alloc(uint64_t bytes) {
    bytes = std::max<uint64_t>(bytes, 64);
    void* p = gpu ? gpu->alloc(bytes) : ::operator new(bytes, std::align_val_t(64));
    allocations.push_back(p);
    zero(p, bytes);
    return p;
  }
  void release(void* p) {
    if (gpu) {
      try {
        gpu->free(p);
      } catch (...) {
      }
    } else {
      ::operator delete(p, std::align_val_t(64));
    }
  }
  void zero(void* p, uint64_t bytes) {
    if (gpu)
      gpu->zero(p, bytes);
    else
      std::memset(p, 0, bytes);
  }
  // Between the caller's memory (`where`) and executor memory: into it
  // (`in`) or out of it.
  void copy(void* dst, const void* src, uint64_t bytes, kv_memory where, bool inward) {
    if (!bytes) return;
    if (!gpu)
      std::memcpy(dst, src, bytes);
    else if (where == kv_memory::device)
      gpu->device_copy(dst, src, bytes);
    else if (inward)
      gpu->to_device(dst, src, bytes);
    else
      gpu->to_host(dst, src, bytes);
  }
  void in(void* dst, const void* src, uint64_t bytes, kv_memory where) { copy(dst, src, bytes, where, true); }
  void out(void* dst, const void* src, uint64_t bytes, kv_memory where) { copy(dst, src, bytes, where, false); }
  kv_detail::counters read_counters() {
    kv_detail::counters c{};
    if (gpu)
      gpu->to_host(&c, count, sizeof(c));
    else
      std::memcpy(&c, count, sizeof(c));
    return c;
  }

  // ---- setup ----
  void attach(std::shared_ptr<page_cache> pc, uint32_t ds, const kv_options& o) {
    if (!pc) throw error("kv store: no cache");
    cache = std::move(pc);
    dataset = ds;
    storage = link().info(dataset);
    opts = o;
    name = "kv store " + storage.description;
    if (cache->on_gpu() && !opts.executor)
      fail("a GPU page cache needs GPU support: pass kv_options::executor = deepwell::durable::gpu_kv_support() "
           "(deepwell_cuda)");
    gpu = opts.executor;
    lanes = gpu ? gpu->lanes() : 1;
    if (lanes != 1 && lanes != 32) fail("an executor of " + std::to_string(lanes) + " lanes (1 or 32)");
    if (storage.read_only) fail("the storage is read-only (a store is opened for writing)");
    if (opts.max_batch == 0 || opts.max_batch >= (1ull << 31))
      fail("max_batch " + std::to_string(opts.max_batch) + ": 1 to 2^31 - 1 ops");
    block = std::min<uint32_t>(opts.block_size ? opts.block_size : 4096, cache->page_size());
    if (!pow2(block) || block < 512) fail("block size " + std::to_string(block) + ": a power of two of at least 512");
    if (storage.bytes < kf::header_bytes)
      fail_io("the storage has " + std::to_string(storage.bytes) + " bytes, too few for a kv header (" +
           std::to_string(kf::header_bytes) + ")");
    sb_ns = region(0, kf::header_bytes, 512, "its header");
    io = std::make_unique<host_queue_client>(cache->link().open_queue_pair(qp_geometry{8, 8, uint32_t(io_chunk)}));
    const uint64_t hw = std::min<uint64_t>(16, std::max(1u, std::thread::hardware_concurrency()));
    threads = unsigned(std::max<uint64_t>(1, std::min<uint64_t>(opts.cpu_threads ? opts.cpu_threads : hw,
                                                                cache->slots() / pages_per_warp)));
  }

  controller_link& link() const { return cache->link(); }

  // A region of the storage as a namespace of its own (a section of the
  // dataset: the link builds it, so a server checks it against the grant).
  uint32_t region(uint64_t offset, uint64_t bytes, uint32_t bs, const char* what, const section_request* with = nullptr) {
    section_request q = with ? *with : section_request{};
    q.dataset = dataset;
    q.offset = offset;
    q.bytes = bytes;
    q.block_size = bs;
    q.writable = true;
    try {
      return link().open_section(q);
    } catch (const error& e) {
      fail_io(std::string(what) + ": " + e.what());
    }
  }

  void check_geometry() {
    if (sb.bucket_bytes > cache->page_size() || cache->page_size() % sb.bucket_bytes)
      fail("buckets of " + std::to_string(sb.bucket_bytes) + " bytes need a cache page that is a multiple of them; the "
           "cache's pages are " + std::to_string(cache->page_size()) + " bytes");
  }
  // The table's blocks: at most a bucket (the table is a whole number of
  // them); with checksums, exactly what a checksum covers.
  uint32_t table_block() const { return sb.sum_block ? sb.sum_block : std::min<uint32_t>(block, sb.bucket_bytes); }

  void attach_regions() {
    section_request sums;
    if (sb.sums_bytes) {
      sums.sums = sums_kind::kept;
      sums.sums_offset = sb.sums_offset;
      sums.sums_bytes = sb.sums_bytes;
      sums.sum_block = sb.sum_block;
    }
    table_ns = region(sb.table_offset, sb.table_bytes, table_block(), "its table (with its checksums)", &sums);
    table_checked = sb.sums_bytes != 0;
    log_ns = region(sb.log_offset, sb.log_bytes, block, "its log");
    table = std::make_unique<array<uint64_t>>(cache, table_ns);
  }

  std::string tag() const {
    char t[32];
    std::snprintf(t, sizeof(t), "dwkv-%016llx", static_cast<unsigned long long>(sb.nonce));
    return t;
  }

  void write_header(const kf::superblock& h) {
    std::vector<uint8_t> img(4096, 0);
    std::memcpy(img.data(), &h, sizeof(h));
    request_status s = io->write(sb_ns, 0, uint32_t(img.size() / 512), 512, img.data());
    if (s.ok()) s = io->flush(sb_ns);
    if (!s.ok()) fail_io("writing the header: " + describe(s));
  }

  void scratch() {
    // No larger than a batch the log can hold (batch_limit): the scratch
    // below is sized by it, and a max_batch the log can never take would
    // only allocate memory (gigabytes for a huge one).
    max_batch = opts.max_batch;
    max_batch = batch_limit();
    const uint64_t vw = sb.value_bytes / 8;
    table_mask = next_pow2(2 * max_batch) - 1;
    keys_in = static_cast<uint64_t*>(alloc(max_batch * 8));
    values_in = static_cast<uint64_t*>(alloc(max_batch * vw * 8));
    ops_in = static_cast<uint8_t*>(alloc(max_batch));
    status = static_cast<uint8_t*>(alloc(max_batch));
    dedup_keys = static_cast<uint64_t*>(alloc((table_mask + 1) * 8));
    dedup_win = static_cast<uint32_t*>(alloc((table_mask + 1) * 4));
    claims = static_cast<uint64_t*>(alloc((table_mask + 1) * 8));
    count = static_cast<kv_detail::counters*>(alloc(sizeof(kv_detail::counters)));
  }

  kv_ref make_ref() const {
    kv_ref r;
    r.table = table->ref();
    r.buckets = sb.buckets;
    r.bucket_words = sb.bucket_bytes / 8;
    r.slots_per_bucket = sb.slots_per_bucket;
    r.slot_words = sb.slot_words;
    r.value_words = sb.value_bytes / 8;
    r.max_probe = sb.max_probe;
    return r;
  }

  // Log rows a batch of n ops may take (entries; its commit record is one
  // more): a warp of 32 packs its ops' entries 32 to a row; a CPU thread (a
  // warp of one lane) puts each op's entries (at most 17) in a row of their own.
  uint64_t rows_bound(uint64_t n) const {
    return lanes == 1 ? n : (n + lanes - 1) / lanes * (1 + sb.value_bytes / 8);
  }
  uint64_t batch_limit() const {
    const uint64_t by_log = lanes == 1 ? uint64_t(sb.log_rows) - 1
                                       : (uint64_t(sb.log_rows) - 1) / (1 + sb.value_bytes / 8) * lanes;
    return std::min<uint64_t>(max_batch, by_log);
  }

  // ---- running phases ----
  void run(kv_phase ph, const kv_detail::batch& b, uint32_t rows = 0, uint64_t entries = 0) {
    if (gpu) {
      gpu->run(*cache, ph, b, rows, entries);
      return;
    }
    if (ph == kv_phase::commit) {
      kv_detail::commit(cpu_lane{}, b, rows, entries);
      return;
    }
    const unsigned t = unsigned(std::max<uint64_t>(1, std::min<uint64_t>(threads, (b.n + 31) / 32)));
    cache->check_capacity(t);
    detail::parallel_for(b.n, t, [&](unsigned th, uint64_t lo, uint64_t hi) {
      cpu_lane w;
      w.q = th;
      for (uint64_t i = lo; i < hi; ++i) {
        if (ph == kv_phase::dedup)
          kv_detail::dedup_op(b, i);
        else if (ph == kv_phase::plan_and_log)
          kv_detail::plan_and_log(w, b, i, true);
        else
          kv_detail::get_ops(w, b, i, true);
      }
    });
  }

  void usable() const {
    if (broken) throw kv_io_error(name + ": no further batches: " + broken_why + "; open the store again to recover it");
  }
  void check_n(uint64_t n) const {
    if (n > batch_limit())
      fail("a batch of " + std::to_string(n) + " ops; at most " + std::to_string(batch_limit()) +
           " (max_batch " + std::to_string(max_batch) + ", and a log of " + std::to_string(sb.log_rows) +
           " rows holds the entries of a batch of that many)");
  }
  void check_memory(const void* p, kv_memory where, const char* what) const {
    if (!p) return;
    if (where == kv_memory::device) {
      if (!gpu) fail(std::string(what) + " is device memory, but the store runs on CPU threads (host memory only)");
      gpu->check_device_pointer(p, what);
    }
  }

  kv_detail::batch base_batch(uint64_t n) {
    kv_detail::batch b;
    b.kv = make_ref();
    b.log = log->ref();
    b.n = n;
    b.status = status;
    b.dedup_keys = dedup_keys;
    b.dedup_win = dedup_win;
    b.dedup_mask = next_pow2(2 * std::max<uint64_t>(n, 1)) - 1;
    b.claims = claims;
    b.claims_mask = b.dedup_mask;
    b.count = count;
    b.txid = txid;
    b.first_row = tail;
    b.warps_persist = lanes > 1;
    zero(dedup_keys, (b.dedup_mask + 1) * 8);
    zero(dedup_win, (b.dedup_mask + 1) * 4);
    zero(claims, (b.dedup_mask + 1) * 8);
    zero(count, sizeof(kv_detail::counters));
    return b;
  }

  // Where the table failed its checksums, if it did: for messages.
  std::string corruption() const {
    if (!table_checked) return "";
    section_checks k;
    try {
      k = link().checks(table_ns);
    } catch (const error&) {
      return "";  // the link is gone: the failure says so itself
    }
    if (!k.mismatches) return "";
    const uint64_t b = k.last_bad_block;
    return " (the table is corrupted: " + std::to_string(k.mismatches) +
           " reads failed their checksums, the last at bytes " + std::to_string(sb.table_offset + b * sb.sum_block) +
           "+" + std::to_string(sb.sum_block) + " of the storage)";
  }

  // Whether the cache met errors since the batch began (reads fail the
  // batch themselves, so these are write-backs), and what they were.
  bool writebacks_failed() const { return cache->stats().errors > errors_at_batch; }
  std::string writeback_failure() const {
    const request_status e = cache->last_error();
    return describe(e) + (e.nvme.value == nvme::sc::capacity_exceeded.value ? ": the disk is full" : "");
  }

  [[noreturn]] void batch_failed(uint32_t packed, const char* step) {
    broken = true;
    broken_why = std::string("a batch failed at ") + step + ": " + describe(request_status::unpack(packed)) + corruption();
    if (writebacks_failed())  // e.g. no page to evict: the dirty ones could not be written
      broken_why += " (write-backs failed meanwhile: " + writeback_failure() + ")";
    throw kv_io_error(name + ": " + broken_why + "; it may or may not be durable: open the store again to recover");
  }

  // set, erase and apply (`mixed`: per-op kinds in `ops`): the caller's
  // arrays checked and brought into executor memory, the batch, its
  // statuses out. An erase-only batch has no values.
  kv_batch_result write_call(bool mixed, const uint8_t* ops, uint8_t op, const uint64_t* keys, const void* values,
                             uint64_t n, kv_memory where, uint8_t* status) {
    usable();
    if (n == 0) return {};
    check_n(n);
    if (mixed) {
      if (!ops) fail("the ops are a null pointer");
      check_memory(ops, where, "the ops");
    }
    check_memory(status, where, "the status array");
    if (mixed && gpu && where == kv_memory::host) {
      in(ops_in, ops, n, where);
      ops = ops_in;
    }
    const uint64_t* k = keys_here(keys, n, where);
    const uint64_t* v = mixed || op != kv_op_erase ? values_here(values, n, where) : nullptr;
    kv_batch_result r = write_batch(ops, op, k, v, n);
    status_out(status, n, where);
    return r;
  }

  // A set / erase / mixed batch whose ops, keys and values are already in
  // executor memory (values may be null for erase-only batches).
  kv_batch_result write_batch(const uint8_t* ops, uint8_t op, const uint64_t* keys, const uint64_t* values, uint64_t n) {
    kv_batch_result res;
    res.ops = n;
    if (uint64_t(tail) + rows_bound(n) + 1 > sb.log_rows) {
      checkpoint();
      res.checkpointed = true;
    }
    errors_at_batch = cache->stats().errors;
    kv_detail::batch b = base_batch(n);
    b.keys = keys;
    b.values = values;
    b.ops = ops;
    b.op = op;
    run(kv_phase::dedup, b);
    run(kv_phase::plan_and_log, b);
    kv_detail::counters c = read_counters();
    if (c.error) batch_failed(c.error, "planning and logging");
    if (c.rows) {
      run(kv_phase::commit, b, c.rows, c.entries);
      const kv_detail::counters after = read_counters();
      if (after.error) batch_failed(after.error, "the commit");
      tail += c.rows + 1;
      res.log_rows = c.rows + 1;
    }
    ++txid;
    ++batches;
    // The batch is durable (its log rows and commit are), but write-backs of
    // the table failed meanwhile (a full disk: each miss then hunts for a
    // clean page while the dirty ones cannot leave): the next call fails at
    // once instead of each taking the cache's timeout over and over.
    if (writebacks_failed()) {
      broken = true;
      broken_why = "write-backs of the table failed (" + writeback_failure() + "); every batch so far is durable";
    }
    take_counts(res, c);
    return res;
  }

  // Inputs from the caller's memory into executor memory where needed.
  const uint64_t* keys_here(const uint64_t* keys, uint64_t n, kv_memory where) {
    if (!keys) fail("the keys are a null pointer");
    check_memory(keys, where, "the keys");
    if (!gpu || where == kv_memory::device) return keys;
    in(keys_in, keys, n * 8, where);
    return keys_in;
  }
  const uint64_t* values_here(const void* values, uint64_t n, kv_memory where) {
    if (!values) fail("the values are a null pointer");
    check_memory(values, where, "the values");
    const bool aligned = reinterpret_cast<uintptr_t>(values) % 8 == 0;
    if (where == kv_memory::device && !aligned) fail("the values are not 8-byte aligned device memory");
    if ((!gpu || where == kv_memory::device) && aligned) return static_cast<const uint64_t*>(values);
    in(values_in, values, n * sb.value_bytes, where);
    return values_in;
  }
  void status_out(uint8_t* dst, uint64_t n, kv_memory where) {
    if (dst) out(dst, status, n, where);
  }

  void checkpoint() {
    usable();
    try {
      log->checkpoint();
    } catch (const std::exception& e) {
      broken = true;
      broken_why = std::string("a checkpoint failed: ") + e.what();
      fail_io("the checkpoint failed: " + std::string(e.what()));
    }
    tail = 0;
    ++checkpoints;
  }
};

kv_store::kv_store(std::unique_ptr<impl> p) : p_(std::move(p)) {}
kv_store::kv_store(kv_store&&) noexcept = default;
kv_store& kv_store::operator=(kv_store&&) noexcept = default;
kv_store::~kv_store() = default;

uint64_t kv_store::bytes_needed(const kv_config& cfg) { return layout(cfg).total_bytes; }

kv_store kv_store::create(std::shared_ptr<page_cache> cache, uint32_t dataset, const kv_config& cfg,
                          const kv_options& opts, bool table_zeroed) {
  auto p = std::make_unique<impl>();
  p->attach(std::move(cache), dataset, opts);
  kf::superblock h = layout(cfg);
  if (p->storage.bytes < h.total_bytes)
    p->fail("the storage has " + std::to_string(p->storage.bytes) + " bytes; a store of " + std::to_string(h.buckets) +
            " buckets and " + std::to_string(h.log_rows) + " log rows needs " + std::to_string(h.total_bytes));
  std::memcpy(h.magic, kf::magic, sizeof(h.magic));
  h.nonce = detail::fresh_nonce();
  h.checksum = header_checksum(h);
  p->sb = h;
  p->check_geometry();
  // An old header goes first, so that a crash before the end leaves no store
  // rather than an old header over a new table.
  p->write_header(kf::superblock{});
  p->attach_regions();
  if (!table_zeroed) {
    std::vector<uint8_t> zeros(io_chunk, 0);
    for (uint64_t at = 0; at < h.table_bytes; at += io_chunk) {
      const uint64_t n = std::min(io_chunk, h.table_bytes - at);
      const uint32_t bs = p->table_block();
      const request_status s = p->io->write(p->table_ns, at / bs, uint32_t(n / bs), bs, zeros.data());
      if (!s.ok()) p->fail_io("zeroing the table at byte " + std::to_string(at) + ": " + describe(s));
    }
    const request_status s = p->io->flush(p->table_ns);
    if (!s.ok()) p->fail_io("flushing the zeroed table: " + describe(s));
  }
  log_config lc;
  lc.form = log_form::redo;
  lc.partitions = 1;
  lc.rows = h.log_rows;
  lc.tag = p->tag();
  try {
    p->log = std::make_unique<write_ahead_log>(write_ahead_log::create(p->cache, p->log_ns, {*p->table}, lc));
  } catch (const kv_io_error&) {
    throw;
  } catch (const error& e) {
    p->fail_io(std::string("creating its log: ") + e.what());
  }
  p->write_header(h);
  p->scratch();
  return kv_store(std::move(p));
}

kv_store kv_store::open(std::shared_ptr<page_cache> cache, uint32_t dataset, const kv_expect& expect,
                        const kv_options& opts) {
  auto p = std::make_unique<impl>();
  p->attach(std::move(cache), dataset, opts);
  std::vector<uint8_t> img(4096);
  const request_status s = p->io->read(p->sb_ns, 0, uint32_t(img.size() / 512), 512, img.data());
  if (!s.ok()) p->fail_io("reading the header: " + describe(s));
  kf::superblock h;
  std::memcpy(&h, img.data(), sizeof(h));
  if (!detail::magic_matches(h, kf::magic)) p->fail_io("not a deepwell kv store (no kv header)");
  if (h.version != kf::version && h.version != 1)
    p->fail_io("kv format version " + std::to_string(h.version) + "; this build reads versions 1 and " +
               std::to_string(kf::version));
  if (h.checksum != header_checksum(h)) p->fail_io("corrupted kv header (its checksum does not match)");
  kv_config c;
  c.value_bytes = h.value_bytes;
  c.buckets = h.buckets;
  c.bucket_bytes = h.bucket_bytes;
  c.max_probe = h.max_probe;
  c.log_rows = h.log_rows;
  kf::superblock want;
  try {
    c.table_checksums = h.version != 1;
    want = layout(c);
  } catch (const error& e) {
    p->fail_io(std::string("corrupted kv header: ") + e.what());
  }
  if (h.key_bytes != kf::key_bytes || want.slot_words != h.slot_words || want.slots_per_bucket != h.slots_per_bucket ||
      want.max_probe != h.max_probe || want.table_offset != h.table_offset || want.table_bytes != h.table_bytes ||
      want.log_offset != h.log_offset || want.log_bytes != h.log_bytes || want.total_bytes != h.total_bytes ||
      want.sums_offset != h.sums_offset || want.sums_bytes != h.sums_bytes || want.sum_block != h.sum_block)
    p->fail_io("corrupted kv header (its geometry does not add up)");
  if (expect.key_bytes && expect.key_bytes != h.key_bytes)
    p->fail("keys are " + std::to_string(h.key_bytes) + " bytes; opened expecting " + std::to_string(expect.key_bytes) +
            "-byte keys");
  if (expect.value_bytes && expect.value_bytes != h.value_bytes)
    p->fail("values are " + std::to_string(h.value_bytes) + " bytes; opened expecting " +
            std::to_string(expect.value_bytes) + "-byte values");
  if (p->storage.bytes < h.total_bytes)
    p->fail_io("truncated: the header says the store has " + std::to_string(h.total_bytes) + " bytes, the storage has " +
            std::to_string(p->storage.bytes));
  p->sb = h;
  p->check_geometry();
  p->attach_regions();
  try {
    p->log = std::make_unique<write_ahead_log>(write_ahead_log::open(p->cache, p->log_ns, {*p->table}, p->tag()));
    // The blocks recovery replays may have been written back after the
    // last checkpoint without their sums reaching storage: recovery reads
    // them unchecked and rewrites them, which sets their sums. It reads no
    // other block of the table.
    if (p->table_checked) p->link().set_verify(p->table_ns, false);
    p->recovered = p->log->recover();
    if (p->table_checked) p->link().set_verify(p->table_ns, true);
  } catch (const error& e) {
    if (p->table_checked) {
      try {
        p->link().set_verify(p->table_ns, true);
      } catch (const error&) {
        // the link is gone: nobody reads the section through it
      }
    }
    p->fail_io(std::string("its log: ") + e.what());
  }
  p->scratch();
  return kv_store(std::move(p));
}

namespace {

// One opener of a store file at a time (any process, any handle): a
// second writer's batches went to the same table and log, and acknowledged
// SETs of one were lost. An exclusive flock held while the store is open;
// taken before a create truncates anything.
detail::unique_fd own_store_file(const std::string& path, bool create) {
  detail::unique_fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0), 0644));
  if (fd.get() < 0 && (errno == EACCES || errno == EROFS) && ::access(path.c_str(), F_OK) == 0)
    throw kv_io_error("kv store file " + path + ": " + std::strerror(errno) +
                      ": a store is opened for writing, even to read it (opening recovers it from its log)");
  if (fd.get() < 0) return fd;  // the open that follows names the problem
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw kv_io_error("kv store file " + path +
                        ": it is open elsewhere (another process or handle holds it): one opener at a time");
    return detail::unique_fd();  // a file system without flock: as before
  }
  return fd;
}

}  // namespace

kv_store kv_store::create_file(std::shared_ptr<page_cache> cache, const std::string& path, const kv_config& cfg,
                               const kv_options& opts) {
  if (!cache) throw error("kv store: no cache");
  detail::check_output_path(path);
  detail::unique_fd owner = own_store_file(path, true);
  const uint64_t bytes = bytes_needed(cfg);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw kv_io_error("kv store file " + path + ": cannot create it: " + std::strerror(errno));
  // Its blocks reserved now (they read as zeros, as a sparse file's): a
  // disk without room for the store says so here, not at a later batch or
  // checkpoint. File systems that cannot reserve keep the sparse file.
  int err = 0;
  if (::ftruncate(fd, off_t(bytes)) != 0)
    err = errno;
  else if (::fallocate(fd, 0, 0, off_t(bytes)) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
    err = errno;
  else if (::fsync(fd) != 0)
    err = errno;
  const bool sized = err == 0;
  ::close(fd);
  if (!sized) {
    ::unlink(path.c_str());  // this call made it (or replaced it: --force)
    throw kv_io_error("kv store file " + path + ": cannot reserve its " + std::to_string(bytes) + " bytes: " +
                      std::strerror(err) + (err == ENOSPC ? " (the disk has no room for the store)" : ""));
  }
  {  // the new directory entry, durable
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  const uint32_t ds = cache->link().open_dataset({path, true, opts.direct, opts.direct ? 4096u : 512u});
  kv_store store = create(std::move(cache), ds, cfg, opts, true);
  store.p_->owner = std::move(owner);
  return store;
}

kv_store kv_store::open_file(std::shared_ptr<page_cache> cache, const std::string& path, const kv_expect& expect,
                             const kv_options& opts) {
  if (!cache) throw error("kv store: no cache");
  detail::unique_fd owner = own_store_file(path, false);
  uint32_t ds = 0;
  try {
    ds = cache->link().open_dataset({path, true, opts.direct, opts.direct ? 4096u : 512u});
  } catch (const error& e) {
    throw kv_io_error("kv store file " + path + ": " + e.what());
  }
  kv_store store = open(std::move(cache), ds, expect, opts);
  store.p_->owner = std::move(owner);
  return store;
}

kv_batch_result kv_store::set(const uint64_t* keys, const void* values, uint64_t n, kv_memory where, uint8_t* status) {
  return p_->write_call(false, nullptr, kv_op_set, keys, values, n, where, status);
}

kv_batch_result kv_store::erase(const uint64_t* keys, uint64_t n, kv_memory where, uint8_t* status) {
  return p_->write_call(false, nullptr, kv_op_erase, keys, nullptr, n, where, status);
}

kv_batch_result kv_store::apply(const uint8_t* ops, const uint64_t* keys, const void* values, uint64_t n,
                                kv_memory where, uint8_t* status) {
  return p_->write_call(true, ops, kv_op_set, keys, values, n, where, status);
}

kv_batch_result kv_store::get(const uint64_t* keys, void* values, uint64_t n, kv_memory where, uint8_t* status) {
  impl& m = *p_;
  m.usable();
  if (n == 0) return {};
  if (n > m.max_batch) m.fail("a batch of " + std::to_string(n) + " gets; at most max_batch = " + std::to_string(m.max_batch));
  if (!values) m.fail("the output values are a null pointer");
  m.check_memory(values, where, "the output values");
  m.check_memory(status, where, "the status array");
  kv_detail::batch b = m.base_batch(n);
  b.keys = m.keys_here(keys, n, where);
  const bool direct = (!m.gpu || where == kv_memory::device) && reinterpret_cast<uintptr_t>(values) % 8 == 0;
  if (where == kv_memory::device && !direct) m.fail("the output values are not 8-byte aligned device memory");
  b.values = direct ? static_cast<uint64_t*>(values) : m.values_in;
  m.run(kv_phase::get, b);
  const kv_detail::counters c = m.read_counters();
  if (c.error) m.fail_io("a get failed: " + describe(request_status::unpack(c.error)) + m.corruption());
  if (!direct) m.out(values, m.values_in, n * m.sb.value_bytes, where);
  m.status_out(status, n, where);
  kv_batch_result r;
  r.ops = n;
  take_counts(r, c);
  return r;
}

kv_stage_ref kv_store::stage() {
  impl& m = *p_;
  const uint64_t vw = m.sb.value_bytes / 8;
  if (!m.st_count) {
    m.st_keys = static_cast<uint64_t*>(m.alloc(m.max_batch * 8));
    m.st_values = static_cast<uint64_t*>(m.alloc(m.max_batch * vw * 8));
    m.st_ops = static_cast<uint8_t*>(m.alloc(m.max_batch));
    m.st_count = static_cast<unsigned long long*>(m.alloc(8));
  }
  kv_stage_ref s;
  s.keys = m.st_keys;
  s.values = m.st_values;
  s.ops = m.st_ops;
  s.count = m.st_count;
  s.capacity = m.batch_limit();
  s.value_words = uint32_t(vw);
  return s;
}

kv_batch_result kv_store::commit_staged(uint8_t* status) {
  impl& m = *p_;
  m.usable();
  if (!m.st_count) return {};
  unsigned long long staged = 0;
  if (m.gpu)
    m.gpu->to_host(&staged, m.st_count, 8);
  else
    staged = *m.st_count;
  const uint64_t n = std::min<uint64_t>(staged, m.batch_limit());
  kv_batch_result r;
  if (n) r = m.write_batch(m.st_ops, kv_op_set, m.st_keys, m.st_values, n);
  r.dropped = staged - n;
  if (status && n) m.out(status, m.status, n, kv_memory::host);
  m.zero(m.st_count, 8);
  return r;
}

void kv_store::checkpoint() { p_->checkpoint(); }

kv_ref kv_store::ref() const { return p_->make_ref(); }

void kv_store::contents(std::vector<uint64_t>& keys, std::vector<uint8_t>& values) {
  impl& m = *p_;
  m.checkpoint();
  keys.clear();
  values.clear();
  const uint64_t sw = m.sb.slot_words, spb = m.sb.slots_per_bucket;
  const uint64_t chunk = std::max<uint64_t>(io_chunk / m.sb.bucket_bytes, 1) * m.sb.bucket_bytes;
  std::vector<uint64_t> buf(chunk / 8);
  for (uint64_t at = 0; at < m.sb.table_bytes; at += chunk) {
    const uint64_t n = std::min(chunk, m.sb.table_bytes - at);
    const uint32_t bs = m.table_block();
    const request_status s = m.io->read(m.table_ns, at / bs, uint32_t(n / bs), bs, buf.data());
    if (!s.ok()) m.fail_io("reading the table at byte " + std::to_string(at) + ": " + describe(s) + m.corruption());
    for (uint64_t b = 0; b < n / m.sb.bucket_bytes; ++b)
      for (uint64_t s2 = 0; s2 < spb; ++s2) {
        const uint64_t* w = buf.data() + b * (m.sb.bucket_bytes / 8) + s2 * sw;
        if (w[0] <= kf::tombstone_word) continue;
        keys.push_back(kf::decode(w[0]));
        const auto* v = reinterpret_cast<const uint8_t*>(w + 1);
        values.insert(values.end(), v, v + m.sb.value_bytes);
      }
  }
}

kv_info kv_store::info() const {
  const impl& m = *p_;
  kv_info i;
  i.key_bytes = m.sb.key_bytes;
  i.value_bytes = m.sb.value_bytes;
  i.bucket_bytes = m.sb.bucket_bytes;
  i.slots_per_bucket = m.sb.slots_per_bucket;
  i.max_probe = m.sb.max_probe;
  i.log_rows = m.sb.log_rows;
  i.buckets = m.sb.buckets;
  i.slots = m.sb.buckets * m.sb.slots_per_bucket;
  i.total_bytes = m.sb.total_bytes;
  i.max_batch = m.batch_limit();
  i.table_checksums = m.table_checked;
  i.sum_block = m.sb.sum_block;
  i.gpu = m.cache->on_gpu();
  i.lanes = m.lanes;
  i.name = m.name;
  return i;
}

const recovery_result& kv_store::last_recovery() const { return p_->recovered; }
uint64_t kv_store::batches() const { return p_->batches; }
uint64_t kv_store::checkpoints() const { return p_->checkpoints; }

}  // namespace deepwell::durable
