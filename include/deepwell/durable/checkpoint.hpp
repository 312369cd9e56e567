// Checkpoints: named buffers (a model's tensors, an optimizer's state) saved
// to a namespace through the page cache, so that a crash at any moment
// leaves either the previous checkpoint or the new one whole, never a mix.
// docs/checkpoints.md describes the format and the protocol.
//
//   auto store = deepwell::checkpoint_store::create(cache, nsid, {{"w", bytes_w, "float32", {1024, 1024}},
//                                                                  {"b", bytes_b, "float32", {1024}}});
//   store->save({{"w", deepwell::device_buffer(d_w, bytes_w)}, {"b", deepwell::device_buffer(d_b, bytes_b)}});
//   ...  // after a crash, in a new process:
//   auto again = deepwell::checkpoint_store::open(cache, nsid, manifest);   // checks the manifest
//   again->load({{"w", deepwell::device_buffer(d_w, bytes_w)}, {"b", deepwell::device_buffer(d_b, bytes_b)}});
//
// The namespace holds two superblock copies, the manifest and two slots.
// save() writes the buffers into the slot the newest checkpoint does not
// use, makes it durable (persist), then writes the next superblock copy
// (generation + 1, naming that slot, with the checksum of the slot's table
// of page hashes) and makes that durable. Only pages whose hash differs
// from what the slot already holds are written (incremental). load() takes
// the newest valid superblock copy, checks the slot's table against it and
// every page of the slot against the table.
//
// Memory: buffers are host memory or CUDA device memory. A GPU page cache,
// or device buffers with a host cache, need the GPU support of deepwell_cuda
// (checkpoint_options::gpu = gpu_checkpoint_support()); a host cache with
// host buffers needs nothing else (CPU threads).
//
// One store object is used by one thread at a time (save, load and verify
// are not concurrent with each other); other users of the same cache may
// run beside it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/config.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell {

// What the store throws: deepwell::error for bad arguments (a manifest or
// buffers that do not match, a namespace too small or read-only, nothing
// saved yet), and this subclass when the namespace's contents are wrong (not
// a store, both superblock copies torn, a corrupt manifest, table or unit)
// or its I/O failed. Messages name the store and what does not match.
class checkpoint_data_error : public data_error {
 public:
  using data_error::data_error;
};

// ---- what a checkpoint holds ----

// One named buffer. dtype and shape are the caller's description (PyTorch
// writes "float32" and the tensor's sizes); the store keeps them, compares
// them when asked (open with an expected manifest) and never interprets
// them. bytes is what counts for the layout.
struct tensor_spec {
  std::string name;            // unique in the manifest, 1 to 1024 bytes
  uint64_t bytes = 0;          // may be 0
  std::string dtype;           // up to 64 bytes ("" if none)
  std::vector<int64_t> shape;  // up to 32 dimensions
  bool operator==(const tensor_spec&) const = default;
};
// Order matters: it is the layout of a slot.
using checkpoint_manifest = std::vector<tensor_spec>;

enum class memory_kind : uint32_t { host, device };

struct checkpoint_buffer {
  void* data = nullptr;
  uint64_t bytes = 0;
  memory_kind where = memory_kind::host;
};
inline checkpoint_buffer host_buffer(const void* p, uint64_t bytes) {
  return {const_cast<void*>(p), bytes, memory_kind::host};
}
inline checkpoint_buffer device_buffer(const void* p, uint64_t bytes) {
  return {const_cast<void*>(p), bytes, memory_kind::device};
}
// Buffers by name. save() needs one for every name of the manifest; load()
// too unless load_options::partial.
using checkpoint_buffers = std::map<std::string, checkpoint_buffer>;

// ---- GPU support (deepwell_cuda) ----

// A byte range moved between memory and the store's namespace: `bytes` at
// offset `mem` of a buffer, at byte `disk` of the namespace.
struct checkpoint_run {
  uint64_t mem = 0;
  uint64_t disk = 0;
  uint64_t bytes = 0;
};

// What the store needs CUDA for: kernels on a GPU cache, hashes of device
// memory, copies between host and device memory. gpu_checkpoint_support()
// makes one (it uses the current CUDA device; calls synchronize before
// returning).
class checkpoint_gpu {
 public:
  virtual ~checkpoint_gpu() = default;
  // out[i] = unit hash (checkpoint_hash) of bytes [i * unit, min((i + 1) * unit, bytes)) of device memory p.
  virtual void hash(const void* p, uint64_t bytes, uint32_t unit, uint64_t* out) = 0;
  // out[i] = checkpoint_hash of the units[i].bytes bytes of device memory at
  // address units[i].mem (one batch: many buffers' units in one kernel).
  virtual void hash_pieces(const std::vector<checkpoint_run>& units, uint64_t* out) = 0;
  // Through a GPU cache: each run copied from memory p (device memory, or
  // host memory when !on_device) into dataset `a` (writes: pages dirty).
  // With p == nullptr (device memory only), each run's mem is an address.
  virtual request_status write(page_cache& cache, const array_ref<uint8_t>& a, const void* p, bool on_device,
                               const std::vector<checkpoint_run>& runs) = 0;
  // Through a GPU cache: each run copied from dataset `a` into memory p.
  virtual request_status read(page_cache& cache, const array_ref<uint8_t>& a, void* p, bool on_device,
                              const std::vector<checkpoint_run>& runs) = 0;
  // cudaMemcpy (synchronous).
  virtual void to_host(void* dst, const void* src, uint64_t bytes) = 0;
  virtual void to_device(void* dst, const void* src, uint64_t bytes) = 0;
  // Device memory (cudaMalloc / cudaFree), for scratch.
  virtual void* alloc(uint64_t bytes) = 0;
  virtual void free(void* p) = 0;
  // Throws deepwell::error naming `what` unless p is device memory the
  // current device's kernels can use.
  virtual void check_device_pointer(const void* p, const std::string& what) = 0;
};
// Defined in deepwell_cuda (src/durable/checkpoint_kernels.cu).
std::shared_ptr<checkpoint_gpu> gpu_checkpoint_support();

// ---- the store ----

struct checkpoint_options {
  // Names the store in errors (a path); "" uses the namespace's description.
  std::string label;
  // CPU threads for host work (hashing host buffers, a host cache's copies
  // and write-backs); 0: the cores, at most 16, and no more than the cache
  // lets pin pages at once.
  uint32_t threads = 0;
  // Needed for a GPU cache or device buffers (gpu_checkpoint_support()).
  std::shared_ptr<checkpoint_gpu> gpu;
  // create(): bytes one page hash covers (a power of two, 512 B to 64 KiB);
  // 0: the cache's page size. Incremental saves write whole units.
  uint32_t unit = 0;
  // save() copies changed units into the cache in chunks of about this
  // many bytes, writing each chunk back while the next one is copied.
  uint64_t chunk_bytes = 32ull << 20;
  // open() (and a load or save that re-reads the superblocks): when the
  // newest superblock copy is corrupted (non-blank, failing its checks,
  // while its slot holds the table of the generation after the intact
  // copy's: a completed save whose superblock was damaged), the store
  // throws checkpoint_data_error rather than quietly using the older
  // generation. Set this to use the older generation, whole and checked,
  // instead; the next save then overwrites the corrupted one's slot.
  bool allow_older = false;
};

struct save_report {
  uint64_t generation = 0;     // of the checkpoint just saved
  uint32_t slot = 0;           // where it lives
  uint64_t data_bytes = 0;     // bytes of the buffers
  uint64_t bytes_written = 0;  // bytes this save wrote into the namespace: changed units, table, superblock
  uint64_t units_written = 0;  // changed units of data (of units_total)
  uint64_t units_total = 0;
  bool incremental = false;    // the slot's previous contents were known (else every unit was written)
  double seconds = 0, hash_seconds = 0, copy_seconds = 0, persist_seconds = 0;
};

struct load_options {
  // Read and check the whole checkpoint before writing any buffer: a
  // failed load then leaves the buffers untouched (it reads twice).
  bool verify_first = false;
  // Buffers for some names only; the others are not read.
  bool partial = false;
};

class checkpoint_store {
 public:
  // Formats namespace `nsid` (writable, through `cache`) as a store of
  // `manifest`, with nothing saved yet (generation 0). Whatever the
  // namespace held is lost. Throws deepwell::error for a bad manifest, a
  // namespace that is too small (bytes_needed) or read-only, or an I/O
  // failure.
  static std::unique_ptr<checkpoint_store> create(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                  checkpoint_manifest manifest, checkpoint_options opts = {});
  // Opens the store on namespace `nsid`. Throws deepwell::error naming the
  // store and what is wrong: not a store (an empty namespace, no valid
  // superblock copy: bad magic, or both torn), a format version it does not
  // read, a manifest whose checksum fails, a namespace smaller than the
  // store, the newest superblock corrupted (unless opts.allow_older).
  static std::unique_ptr<checkpoint_store> open(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                checkpoint_options opts = {});
  // The same, and the store's manifest must equal `expected` (names, order,
  // sizes, dtypes, shapes): else the error names the first difference.
  static std::unique_ptr<checkpoint_store> open(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                const checkpoint_manifest& expected, checkpoint_options opts);
  // Bytes a namespace needs for a store of `manifest` with hash units of `unit` bytes.
  static uint64_t bytes_needed(const checkpoint_manifest& manifest, uint32_t unit);

  ~checkpoint_store();
  checkpoint_store(const checkpoint_store&) = delete;
  checkpoint_store& operator=(const checkpoint_store&) = delete;

  const checkpoint_manifest& manifest() const;
  // The newest checkpoint's generation (0: none saved yet).
  uint64_t generation() const;
  const std::string& label() const;
  uint32_t unit() const;
  // Throws, naming the first difference, unless the manifest equals `expected`.
  void check_manifest(const checkpoint_manifest& expected) const;

  // Saves every buffer as the next generation. Returns once it is durable
  // (and is the one load() returns). On failure throws deepwell::error: the
  // previous checkpoint is still the newest unless the new superblock
  // reached the disk (then the new one is whole: a crash during save()
  // leaves one or the other). Buffers must not change during the call:
  // finish (synchronize) GPU work that writes device buffers first; the
  // store's kernels run on a stream of their own.
  save_report save(const checkpoint_buffers& buffers);

  // Copies the newest checkpoint into the buffers, checking the slot's
  // table against the superblock and every unit against the table. On
  // failure throws deepwell::error naming the store, the generation and
  // what does not match (buffer, unit, bytes); the buffers may then be
  // partly overwritten, unless verify_first was set.
  void load(const checkpoint_buffers& buffers, const load_options& opts = {});

  // Reads the newest checkpoint and checks it (as load does) without
  // copying it anywhere. Throws as load does.
  void verify();

  struct impl;  // opaque (src/durable/checkpoint.cpp)
  explicit checkpoint_store(std::unique_ptr<impl> p);

 private:
  std::unique_ptr<impl> p_;
};

// ---- the hash (host and device code compute the same value) ----
//
// A unit of n bytes is read as 16-byte chunks (the last one zero-padded);
// chunk c goes to lane c % 32, whose 64-bit accumulator takes its two
// little-endian words through xxHash64's round; the 32 accumulators are then
// merged in lane order with n, and the result avalanched. On the GPU a warp
// hashes a unit, each lane its chunks (coalesced 16-byte loads).
namespace checkpoint_hash {
constexpr uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full, p3 = 0x165667B19E3779F9ull,
                   p4 = 0x85EBCA77C2B2AE63ull, p5 = 0x27D4EB2F165667C5ull;
constexpr uint32_t lanes = 32;

DW_HD DW_FORCEINLINE uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
DW_HD DW_FORCEINLINE uint64_t mix(uint64_t acc, uint64_t in) { return rotl(acc + in * p2, 31) * p1; }
DW_HD DW_FORCEINLINE uint64_t lane_seed(uint32_t lane, uint64_t seed) { return seed + p1 + p2 * (lane + 1); }
DW_HD DW_FORCEINLINE uint64_t chunk(uint64_t acc, uint64_t w0, uint64_t w1) { return mix(mix(acc, w0), w1); }
// Merges the lanes' accumulators (in lane order) with the unit's length:
// begin, then each lane's accumulator in turn, then end.
DW_HD DW_FORCEINLINE uint64_t finish_begin(uint64_t bytes, uint64_t seed) { return seed + p5 + bytes; }
DW_HD DW_FORCEINLINE uint64_t finish_lane(uint64_t h, uint64_t acc) { return rotl(h ^ mix(0, acc), 27) * p1 + p4; }
DW_HD DW_FORCEINLINE uint64_t finish_end(uint64_t h) {
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}
DW_HD inline uint64_t finish(const uint64_t* acc, uint64_t bytes, uint64_t seed) {
  uint64_t h = finish_begin(bytes, seed);
  for (uint32_t l = 0; l < lanes; ++l) h = finish_lane(h, acc[l]);
  return finish_end(h);
}

// The whole hash on one thread (host code, tests, and the GPU's reference).
inline uint64_t of(const void* data, uint64_t bytes, uint64_t seed = 0) {
  const auto* b = static_cast<const uint8_t*>(data);
  uint64_t acc[lanes];
  for (uint32_t l = 0; l < lanes; ++l) acc[l] = lane_seed(l, seed);
  const uint64_t full = bytes / 16;
  uint64_t c = 0;
  for (; c + lanes <= full; c += lanes)  // 512-byte blocks: every lane once
    for (uint32_t l = 0; l < lanes; ++l) {
      uint64_t w[2];
      __builtin_memcpy(w, b + (c + l) * 16, 16);
      acc[l] = chunk(acc[l], w[0], w[1]);
    }
  for (; c < full; ++c) {
    uint64_t w[2];
    __builtin_memcpy(w, b + c * 16, 16);
    acc[c % lanes] = chunk(acc[c % lanes], w[0], w[1]);
  }
  if (bytes % 16) {
    uint64_t w[2] = {0, 0};
    __builtin_memcpy(w, b + full * 16, bytes % 16);
    acc[full % lanes] = chunk(acc[full % lanes], w[0], w[1]);
  }
  return finish(acc, bytes, seed);
}
}  // namespace checkpoint_hash

}  // namespace deepwell
