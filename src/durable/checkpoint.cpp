// The checkpoint store (include/deepwell/durable/checkpoint.hpp): its save /
// load protocol, in host code. Data moves through the
// page cache: CPU threads for a host cache, the GPU support's kernels
// (checkpoint_gpu, deepwell_cuda) for a GPU cache or device buffers.
// docs/checkpoints.md explains the protocol and why it is crash-safe.
//
// Its format (superblocks, manifest, slots and their tables): checkpoint_format.hpp.
#include "deepwell/durable/checkpoint.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <thread>

#include "deepwell/common/detail/parallel.hpp"
#include "common/disk_header.hpp"
#include "durable/checkpoint_format.hpp"

namespace deepwell {

using namespace checkpoint_format;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

struct checkpoint_store::impl {
  std::shared_ptr<page_cache> cache;
  uint32_t nsid = 0;
  std::unique_ptr<array<uint8_t>> arr;
  array_ref<uint8_t> ref{};
  checkpoint_options opts;
  std::string label;
  checkpoint_manifest manifest;
  std::vector<uint8_t> manifest_image;
  uint64_t manifest_checksum = 0;
  uint32_t unit = 0;
  layout lay;
  uint8_t store_id[16] = {};

  uint64_t gen = 0;                    // the newest checkpoint
  uint8_t raw[2][header_size] = {};    // the superblock copies as last read or written
  bool known[2] = {false, false};      // slot s was last written with hashes[s] (its table checked out)
  std::vector<uint64_t> hashes[2];     // per unit, when known
  bool uncertain = false;              // a save failed: the superblocks on disk are not known

  // ---- messages ----
  [[noreturn]] void fail(const std::string& what) const {
    throw error("checkpoint store " + label + ": " + what);
  }
  // The namespace's contents are wrong, or its I/O failed.
  [[noreturn]] void fail_data(const std::string& what) const {
    throw checkpoint_data_error("checkpoint store " + label + ": " + what);
  }
  void need_ok(request_status s, const std::string& what) const {
    if (!s.ok()) fail_data(what + ": " + describe(s));
  }

  // ---- threads ----
  unsigned cpu_threads() const {
    return opts.threads ? opts.threads : std::min(16u, std::max(1u, std::thread::hardware_concurrency()));
  }
  // Each CPU thread is a warp that may pin a warp's pages: no more than the cache holds.
  unsigned cache_threads(uint64_t work) const {
    const uint64_t by_cache = std::max<uint64_t>(1, cache->slots() / pages_per_warp);
    return unsigned(std::max<uint64_t>(1, std::min<uint64_t>({cpu_threads(), by_cache, work})));
  }

  checkpoint_gpu& gpu(const std::string& why) const {
    if (!opts.gpu)
      fail(why + " needs GPU support: pass checkpoint_options::gpu = deepwell::gpu_checkpoint_support() "
                 "(deepwell_cuda)");
    return *opts.gpu;
  }

  // ---- moving bytes through the cache ----

  // A host cache, host memory: CPU threads, each run cut into pieces.
  request_status host_copy(uint8_t* mem, const std::vector<checkpoint_run>& runs, bool to_cache) const {
    const uint64_t piece = std::max<uint64_t>(uint64_t(cache->page_size()) * 16, 256 * 1024);
    std::vector<checkpoint_run> pieces;
    for (const checkpoint_run& r : runs)
      for (uint64_t o = 0; o < r.bytes; o += piece)
        pieces.push_back({r.mem + o, r.disk + o, std::min(piece, r.bytes - o)});
    std::atomic<uint32_t> first{0};
    detail::parallel_for(pieces.size(), cache_threads(pieces.size()), [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) {
        const checkpoint_run& p = pieces[i];
        const request_status s = to_cache ? ref.write_range(mem + p.mem, p.disk, p.bytes)
                                          : ref.read_range(mem + p.mem, p.disk, p.bytes);
        if (!s.ok()) {
          uint32_t zero = 0;
          first.compare_exchange_strong(zero, s.pack());
          return;
        }
      }
    });
    return request_status::unpack(first.load());
  }

  // Runs between memory p (of kind k) and the namespace, through the cache.
  request_status move(void* p, memory_kind k, const std::vector<checkpoint_run>& runs, bool to_cache,
                      const std::string& what) {
    if (runs.empty()) return {};
    if (cache->on_gpu()) {
      checkpoint_gpu& g = gpu("a GPU page cache");
      return to_cache ? g.write(*cache, ref, p, k == memory_kind::device, runs)
                      : g.read(*cache, ref, p, k == memory_kind::device, runs);
    }
    if (k == memory_kind::host) return host_copy(static_cast<uint8_t*>(p), runs, to_cache);
    // Device memory, host cache: through a host bounce buffer.
    checkpoint_gpu& g = gpu(what + " (device memory)");
    uint64_t most = 0;
    for (const checkpoint_run& r : runs) most = std::max(most, r.bytes);
    std::vector<uint8_t> bounce(std::min<uint64_t>(most, 64ull << 20));
    auto* base = static_cast<uint8_t*>(p);
    for (const checkpoint_run& r : runs)
      for (uint64_t o = 0; o < r.bytes; o += bounce.size()) {
        const uint64_t n = std::min<uint64_t>(bounce.size(), r.bytes - o);
        if (to_cache) g.to_host(bounce.data(), base + r.mem + o, n);
        const request_status s = host_copy(bounce.data(), {{0, r.disk + o, n}}, to_cache);
        if (!s.ok()) return s;
        if (!to_cache) g.to_device(base + r.mem + o, bounce.data(), n);
      }
    return {};
  }

  void io(void* host, uint64_t disk, uint64_t bytes, bool to_cache, const std::string& what) {
    need_ok(move(host, memory_kind::host, {{0, disk, bytes}}, to_cache, what), what);
  }

  // Bytes [off, off + len) of the namespace durable.
  void persist(uint64_t off, uint64_t len, const std::string& what) {
    if (!len) return;
    const uint32_t shift = ref.cache.page_shift();
    const uint64_t first = off >> shift, last = (off + len - 1) >> shift;
    request_status r{};
    if (cache->on_gpu()) {
      r = cache->persist(ref.dataset, first, last);
    } else {
      // CPU threads, each writing back its share of the pages; their
      // flushes are shared (group commit).
      const uint64_t pages = last - first + 1;
      std::atomic<uint32_t> bad{0};
      detail::parallel_for(pages, cache_threads(pages / 8 + 1), [&](unsigned, uint64_t b, uint64_t e) {
        const request_status s = ref.cache.persist(one_lane{}, ref.dataset, first + b, first + e - 1);
        uint32_t zero = 0;
        if (!s.ok()) bad.compare_exchange_strong(zero, s.pack());
      });
      r = request_status::unpack(bad.load());
    }
    need_ok(r, what);
  }

  // ---- hashing ----

  // Unit hashes of every buffer into now[] (by global unit): device
  // buffers in one batch on the GPU, host buffers on CPU threads.
  void hash_all(const std::vector<const checkpoint_buffer*>& src, std::vector<uint64_t>& now) {
    std::vector<checkpoint_run> units;  // device units: mem = address, bytes; disk = global unit index
    for (size_t i = 0; i < manifest.size(); ++i) {
      const checkpoint_buffer& b = *src[i];
      if (b.where != memory_kind::device) {
        hash_into(b, now.data() + lay.first_unit[i]);
        continue;
      }
      const uint64_t n = units_of(b.bytes, unit);
      for (uint64_t u = 0; u < n; ++u)
        units.push_back({uint64_t(reinterpret_cast<uintptr_t>(b.data)) + u * unit, lay.first_unit[i] + u,
                         std::min<uint64_t>(unit, b.bytes - u * unit)});
    }
    if (units.empty()) return;
    std::vector<uint64_t> h(units.size());
    gpu("hashing device memory").hash_pieces(units, h.data());
    for (size_t k = 0; k < units.size(); ++k) now[units[k].disk] = h[k];
  }

  // Copies the runs of every buffer into the cache in chunks of about
  // `chunk` bytes; while chunk k + 1 is copied, chunk k is written back
  // and flushed (persist) on a helper thread, one persist at a time. The
  // last chunk is left dirty for the caller's persist of the whole slot.
  void write_pipelined(const std::vector<const checkpoint_buffer*>& src,
                       const std::vector<std::vector<checkpoint_run>>& runs, const std::string& what) {
    const uint64_t chunk = std::max<uint64_t>(1, opts.chunk_bytes);
    struct piece {
      size_t buffer;
      checkpoint_run run;
    };
    std::vector<std::vector<piece>> chunks(1);
    uint64_t filled = 0;
    for (size_t i = 0; i < runs.size(); ++i)
      for (const checkpoint_run& r : runs[i])
        for (uint64_t o = 0; o < r.bytes;) {
          if (filled >= chunk) {
            chunks.emplace_back();
            filled = 0;
          }
          const uint64_t n = std::min(r.bytes - o, chunk - filled);
          chunks.back().push_back({i, {r.mem + o, r.disk + o, n}});
          filled += n;
          o += n;
        }
    std::exception_ptr failed;
    std::thread writer;
    auto join = [&] {
      if (writer.joinable()) writer.join();
      if (failed) std::rethrow_exception(failed);
    };
    try {
      for (size_t c = 0; c < chunks.size(); ++c) {
        copy_chunk(src, chunks[c], what);
        join();
        if (c + 1 == chunks.size() || chunks[c].empty()) break;
        const uint64_t lo = chunks[c].front().run.disk;
        const uint64_t hi = chunks[c].back().run.disk + chunks[c].back().run.bytes;
        writer = std::thread([this, lo, hi, &failed, what] {
          try {
            persist(lo, hi - lo, what + ": writing back slot bytes");
          } catch (...) {
            failed = std::current_exception();
          }
        });
      }
    } catch (...) {
      if (writer.joinable()) writer.join();
      throw;
    }
    join();
  }

  template <class Piece>
  void copy_chunk(const std::vector<const checkpoint_buffer*>& src, const std::vector<Piece>& pieces,
                  const std::string& what) {
    // Device buffers through a GPU cache: one kernel for all of them
    // (runs' mem are addresses).
    if (cache->on_gpu()) {
      std::vector<checkpoint_run> dev;
      for (const Piece& pc : pieces)
        if (src[pc.buffer]->where == memory_kind::device)
          dev.push_back({uint64_t(reinterpret_cast<uintptr_t>(src[pc.buffer]->data)) + pc.run.mem, pc.run.disk,
                         pc.run.bytes});
      if (!dev.empty()) need_ok(opts.gpu->write(*cache, ref, nullptr, true, dev), what + ": writing device buffers");
    }
    for (size_t a = 0; a < pieces.size();) {
      size_t b = a;
      std::vector<checkpoint_run> mine;
      while (b < pieces.size() && pieces[b].buffer == pieces[a].buffer) mine.push_back(pieces[b++].run);
      const checkpoint_buffer& buf = *src[pieces[a].buffer];
      if (!(cache->on_gpu() && buf.where == memory_kind::device)) {
        const std::string name = "buffer '" + manifest[pieces[a].buffer].name + "'";
        need_ok(move(buf.data, buf.where, mine, true, name), what + ": writing " + name);
      }
      a = b;
    }
  }

  void hash_into(const checkpoint_buffer& b, uint64_t* out) {
    const uint64_t n = units_of(b.bytes, unit);
    if (!n) return;
    if (b.where == memory_kind::device) {
      gpu("hashing device memory").hash(b.data, b.bytes, unit, out);
      return;
    }
    const auto* p = static_cast<const uint8_t*>(b.data);
    const unsigned t = unsigned(std::min<uint64_t>(cpu_threads(), std::max<uint64_t>(1, n / 4)));
    detail::parallel_for(n, t, [&](unsigned, uint64_t lo, uint64_t hi) {
      for (uint64_t u = lo; u < hi; ++u)
        out[u] = hash_of(p + u * unit, std::min<uint64_t>(unit, b.bytes - u * unit), 0);
    });
  }

  // ---- records ----

  sb_header make_header(uint64_t generation, uint32_t slot, uint64_t table_checksum) const {
    sb_header h;
    detail::stamp_header(h, sb_magic, format_version);
    h.header_bytes = header_size;
    std::memcpy(h.store_id, store_id, 16);
    h.generation = generation;
    h.copy = generation % 2;
    h.slot = generation ? slot : 0;
    h.unit = unit;
    h.buffers = uint32_t(manifest.size());
    h.region_bytes = region;
    h.manifest_offset = lay.manifest_offset;
    h.manifest_bytes = lay.manifest_bytes;
    h.manifest_checksum = manifest_checksum;
    h.slot_offset[0] = lay.slot_offset[0];
    h.slot_offset[1] = lay.slot_offset[1];
    h.slot_stride = lay.slot_stride;
    h.data_bytes = lay.data_bytes;
    h.table_offset = lay.table_offset;
    h.table_bytes = lay.table_bytes;
    h.units = lay.units;
    h.store_bytes = lay.store_bytes;
    h.table_checksum = table_checksum;
    h.saved_unix_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
    h.checksum = header_checksum(h);
    return h;
  }

  std::vector<uint8_t> make_table(uint64_t generation, uint32_t slot, const std::vector<uint64_t>& h) const {
    std::vector<uint8_t> t(lay.table_bytes, 0);
    table_header th;
    detail::stamp_header(th, table_magic, format_version);
    th.slot = slot;
    std::memcpy(th.store_id, store_id, 16);
    th.generation = generation;
    th.units = lay.units;
    std::memcpy(t.data(), &th, sizeof th);
    if (!h.empty()) std::memcpy(t.data() + table_header_size, h.data(), h.size() * 8);
    return t;
  }

  // Why slot `slot`'s table image does not belong to generation `generation`
  // with checksum `sum`, or "".
  std::string table_problem(const std::vector<uint8_t>& t, uint64_t generation, uint32_t slot, uint64_t sum) const {
    const std::string why = table_header_problem(t, generation, slot);
    if (!why.empty()) return why;
    const uint64_t got = hash_of(t.data(), t.size(), seed_table);
    if (got != sum)
      return "table checksum " + hex64(got) + " does not match the superblock's " + hex64(sum) +
             " (the slot was overwritten or torn)";
    return "";
  }

  // The same without the checksum (which the superblock holds): whether the
  // table's header is this store's, for `generation` in `slot`.
  std::string table_header_problem(const std::vector<uint8_t>& t, uint64_t generation, uint32_t slot) const {
    table_header th;
    std::memcpy(&th, t.data(), sizeof th);
    if (!detail::magic_matches(th, table_magic)) return "holds no checkpoint table (bad magic)";
    if (std::memcmp(th.store_id, store_id, 16) != 0)
      return "holds another store's table (store " + hex(th.store_id, 16) + ", this store is " + hex(store_id, 16) +
             ")";
    if (th.generation != generation || th.slot != slot || th.units != lay.units)
      return "holds the table of generation " + std::to_string(th.generation) + " (slot " + std::to_string(th.slot) +
             ", " + std::to_string(th.units) + " units), not generation " + std::to_string(generation);
    return "";
  }

  std::vector<uint64_t> table_hashes(const std::vector<uint8_t>& t) const {
    std::vector<uint64_t> out(lay.units);
    if (lay.units) std::memcpy(out.data(), t.data() + table_header_size, lay.units * 8);
    return out;
  }

  std::vector<uint8_t> read_table(uint32_t slot) {
    std::vector<uint8_t> t(lay.table_bytes);
    io(t.data(), lay.slot_offset[slot] + lay.table_offset, t.size(), false,
       "reading the table of slot " + std::to_string(slot));
    return t;
  }

  // ---- state from the superblocks ----

  void read_headers(uint8_t out[2][header_size]) {
    for (uint32_t c = 0; c < 2; ++c) io(out[c], c * region, header_size, false, "reading superblock copy " + std::to_string(c));
  }

  // Takes the newest valid copy of `hdrs` as the state, with the manifest
  // it names (read and checked unless `have_manifest`), and which slots'
  // contents are known (tables that check out).
  void adopt(const uint8_t hdrs[2][header_size], bool have_manifest) {
    sb_header h[2];
    std::string why[2];
    bool ok[2];
    for (uint32_t c = 0; c < 2; ++c) {
      why[c] = header_problem(hdrs[c], c, h[c]);
      ok[c] = why[c].empty();
    }
    if (!ok[0] && !ok[1]) {
      if (why[0] == "blank" && why[1] == "blank")
        fail_data("no checkpoint store here: both superblock copies are blank (create one first)");
      fail_data("no valid superblock: copy 0: " + why[0] + "; copy 1: " + why[1] +
           " (not a deepwell checkpoint store, or both copies torn)");
    }
    const uint32_t a = !ok[1] ? 0 : !ok[0] ? 1 : h[1].generation > h[0].generation ? 1 : 0;
    const sb_header& top = h[a];
    if (have_manifest) {
      if (std::memcmp(top.store_id, store_id, 16) != 0 || top.manifest_checksum != manifest_checksum)
        fail("the store was formatted again since it was opened (store " + hex(top.store_id, 16) + ", was " +
             hex(store_id, 16) + "): open it again");
    } else {
      std::memcpy(store_id, top.store_id, 16);
      unit = top.unit;
      if (unit < 512 || unit > 65536 || (unit & (unit - 1)))
        fail_data("superblock copy " + std::to_string(a) + " names a unit of " + std::to_string(unit) + " bytes");
      if (top.manifest_bytes > max_manifest_bytes || top.manifest_offset != 2 * region)
        fail_data("superblock copy " + std::to_string(a) + " names a manifest of " + std::to_string(top.manifest_bytes) +
             " bytes at " + std::to_string(top.manifest_offset));
      const uint64_t have = arr->size();
      if (top.manifest_offset + top.manifest_bytes > have)
        fail_data("the manifest (" + std::to_string(top.manifest_bytes) + " bytes at " + std::to_string(top.manifest_offset) +
             ") lies past the end of the namespace (" + std::to_string(have) + " bytes)");
      std::vector<uint8_t> img(top.manifest_bytes);
      io(img.data(), top.manifest_offset, img.size(), false, "reading the manifest");
      const uint64_t sum = hash_of(img.data(), img.size(), seed_manifest);
      if (sum != top.manifest_checksum)
        fail_data("manifest checksum " + hex64(sum) + " does not match the superblock's " + hex64(top.manifest_checksum) +
             " (the manifest is corrupt)");
      std::vector<uint64_t> offsets;
      try {
        manifest = decode_manifest(img, offsets);
      } catch (const error& e) {
        fail_data(std::string("the manifest cannot be read: ") + e.what());
      }
      try {
        check_manifest_shape(manifest);
      } catch (const error& e) {
        fail_data(std::string("the stored manifest is invalid: ") + e.what());
      }
      lay = make_layout(manifest, unit);
      if (offsets != lay.offset || lay.manifest_bytes != top.manifest_bytes)
        fail_data("the manifest's buffer offsets do not follow the format (written by another version?)");
      manifest_image = std::move(img);
      manifest_checksum = sum;
      const auto mismatch = [&](const char* field, uint64_t got, uint64_t want) {
        if (got != want)
          fail_data(std::string("superblock field ") + field + " is " + std::to_string(got) + ", the manifest gives " +
               std::to_string(want));
      };
      mismatch("buffers", top.buffers, manifest.size());
      mismatch("slot_offset[0]", top.slot_offset[0], lay.slot_offset[0]);
      mismatch("slot_offset[1]", top.slot_offset[1], lay.slot_offset[1]);
      mismatch("slot_stride", top.slot_stride, lay.slot_stride);
      mismatch("data_bytes", top.data_bytes, lay.data_bytes);
      mismatch("table_offset", top.table_offset, lay.table_offset);
      mismatch("table_bytes", top.table_bytes, lay.table_bytes);
      mismatch("units", top.units, lay.units);
      mismatch("store_bytes", top.store_bytes, lay.store_bytes);
      if (lay.store_bytes > have)
        fail_data("the namespace has " + std::to_string(have) + " bytes; the store needs " + std::to_string(lay.store_bytes));
    }
    // The other copy failing its checks while not blank: a damaged
    // superblock, perhaps of a newer generation than `top`'s.
    if (!ok[1 - a] && why[1 - a] != "blank" && !opts.allow_older)
      refuse_if_newer_was_saved(1 - a, why[1 - a], top);
    gen = top.generation;
    for (uint32_t c = 0; c < 2; ++c) {
      std::memcpy(raw[c], hdrs[c], header_size);
      known[c] = false;
      hashes[c].clear();
    }
    // The tables that vouch for their slot: the newest generation's, and
    // the one before it if its copy is intact (every save durably
    // invalidates the copy naming the slot it is about to overwrite, so an
    // intact copy means its slot was not touched since).
    for (uint32_t c = 0; c < 2; ++c) {
      if (!ok[c] || h[c].generation == 0 || std::memcmp(h[c].store_id, store_id, 16) != 0) continue;
      if (c != a && h[c].generation + 1 != gen) continue;
      std::vector<uint8_t> t;
      try {
        t = read_table(c);
      } catch (const error&) {
        continue;  // load reports it; a save rewrites the slot whole
      }
      if (!table_problem(t, h[c].generation, c, h[c].table_checksum).empty()) continue;
      hashes[c] = table_hashes(t);
      known[c] = true;
    }
  }

  // Copy `c` is damaged (not blank, fails its checks: `why`) and `older`
  // is the intact copy load would otherwise use. A save never leaves a
  // damaged copy behind: it blanks the copy durably (step 2) before writing
  // the slot, and a superblock is one sector, written whole or not at all.
  // So if slot c holds the table of generation older + 1 of this store, that
  // generation was saved (through step 4 at least) and its superblock was
  // damaged afterwards: throw rather than quietly give the older one.
  // (Without that table the damaged copy is an older generation's, and
  // `older` is the newest anyway.) The message says whether the slot's
  // data checks out against the table (the newer generation is whole).
  void refuse_if_newer_was_saved(uint32_t c, const std::string& why, const sb_header& older) {
    const uint64_t newer = older.generation + 1;
    if (newer % 2 != c) return;
    std::vector<uint8_t> t;
    try {
      t = read_table(c);
    } catch (const error&) {
      return;  // unreadable: no evidence of a newer generation
    }
    if (!table_header_problem(t, newer, c).empty()) return;
    bool whole = true;
    try {
      verify_data(table_hashes(t), std::vector<bool>(manifest.size(), true), newer);
    } catch (const error&) {
      whole = false;
    }
    fail_data("the newest superblock is corrupted: superblock copy " + std::to_string(c) + " (slot " +
              std::to_string(c) + " holds the table of generation " + std::to_string(newer) + ") fails its check: " +
              why + "; " +
              (whole ? "every unit of slot " + std::to_string(c) + " matches that table (generation " +
                           std::to_string(newer) + " was saved whole; its superblock was damaged since)"
                     : "some units of slot " + std::to_string(c) + " do not match that table") +
              ". Generation " + std::to_string(older.generation) + " (copy " + std::to_string(1 - c) +
              ") is intact: to use it, open with allow_older (C++ checkpoint_options::allow_older, C "
              "dw_checkpoint_options.allow_older, Python allow_older=True)");
  }

  // Brings the state up to date with the superblocks in the cache (another
  // store object may have saved), after making them durable if a failed
  // save left them unknown.
  void sync() {
    if (uncertain) persist(0, 2 * region, "making the superblocks durable after a failed save");
    uint8_t hdrs[2][header_size];
    read_headers(hdrs);
    if (uncertain || std::memcmp(hdrs, raw, sizeof raw) != 0) adopt(hdrs, true);
    uncertain = false;
  }

  // ---- buffers ----

  std::vector<const checkpoint_buffer*> match(const checkpoint_buffers& bufs, bool partial, const char* op) const {
    std::vector<const checkpoint_buffer*> out(manifest.size(), nullptr);
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < manifest.size(); ++i) index[manifest[i].name] = i;
    for (const auto& [name, b] : bufs) {
      auto it = index.find(name);
      if (it == index.end())
        fail(std::string(op) + ": buffer '" + name + "' is not in the store's manifest (" +
             std::to_string(manifest.size()) + " buffers)");
      const tensor_spec& t = manifest[it->second];
      if (b.bytes != t.bytes)
        fail(std::string(op) + ": buffer '" + name + "' has " + std::to_string(b.bytes) + " bytes; the manifest says " +
             spec_text(t));
      if (!b.data && b.bytes) fail(std::string(op) + ": buffer '" + name + "' is a null pointer");
      if (b.where == memory_kind::device && b.bytes)
        gpu(std::string("buffer '") + name + "' in device memory").check_device_pointer(b.data, "buffer '" + name + "'");
      out[it->second] = &b;
    }
    if (!partial)
      for (size_t i = 0; i < manifest.size(); ++i)
        if (!out[i])
          fail(std::string(op) + ": no buffer for " + spec_text(manifest[i]) + " (the manifest has " +
               std::to_string(manifest.size()) + " buffers; " + std::to_string(bufs.size()) + " given)");
    return out;
  }

  // Units to write of buffer i (write[global unit] != 0) as runs
  // (consecutive units merged).
  std::vector<checkpoint_run> changed_runs(size_t i, uint32_t slot, const std::vector<uint8_t>& write,
                                           uint64_t& units_changed) const {
    std::vector<checkpoint_run> runs;
    const tensor_spec& t = manifest[i];
    const uint64_t n = units_of(t.bytes, unit), f = lay.first_unit[i];
    const uint64_t base = lay.slot_offset[slot] + lay.offset[i];
    for (uint64_t u = 0; u < n; ++u) {
      if (!write[f + u]) continue;
      ++units_changed;
      const uint64_t lo = u * unit, len = std::min<uint64_t>(unit, t.bytes - lo);
      if (!runs.empty() && runs.back().mem + runs.back().bytes == lo)
        runs.back().bytes += len;
      else
        runs.push_back({lo, base + lo, len});
    }
    return runs;
  }

  // Which units a save into slot s must write: all when the slot's
  // contents are not known; else those whose hash differs from the one the
  // slot's table records, and those the table agrees with but whose bytes
  // in the slot do not: a table says what was written, not what is there
  // now (a byte corrupted or a write lost since), so every unit about to be
  // skipped is read back from the slot and hashed again.
  std::vector<uint8_t> units_to_write(uint32_t s, const std::vector<uint64_t>& now, const std::string& what) {
    std::vector<uint8_t> write(lay.units, 1);
    if (!known[s]) return write;
    for (uint64_t u = 0; u < lay.units; ++u) write[u] = now[u] != hashes[s][u];
    scratch buf(*this);
    std::vector<uint64_t> h;
    for (size_t i = 0; i < manifest.size(); ++i) {
      const uint64_t n = units_of(manifest[i].bytes, unit), f = lay.first_unit[i];
      // Runs of skipped units [u, v), read a scratch buffer's worth at a time.
      for (uint64_t u = 0; u < n;) {
        if (write[f + u]) {
          ++u;
          continue;
        }
        uint64_t v = u;
        while (v < n && !write[f + v] && (v - u + 1) * unit <= buf.bytes) ++v;
        const uint64_t lo = u * unit, len = std::min<uint64_t>(v * unit, manifest[i].bytes) - lo;
        need_ok(move(buf.get(len), buf.kind, {{0, lay.slot_offset[s] + lay.offset[i] + lo, len}}, false, what),
                what + ": reading back unchanged units of buffer '" + manifest[i].name + "' in slot " +
                    std::to_string(s));
        h.assign(v - u, 0);
        hash_into({buf.p, len, buf.kind}, h.data());
        for (uint64_t k = u; k < v; ++k) write[f + k] = h[k - u] != now[f + k];
        u = v;
      }
    }
    return write;
  }

  // The newest checkpoint's table, checked against its superblock.
  std::vector<uint64_t> checked_table() {
    if (gen == 0) fail("no checkpoint has been saved in it yet (generation 0)");
    const uint32_t s = gen % 2;
    sb_header h;
    std::memcpy(&h, raw[s], sizeof h);
    const std::vector<uint8_t> t = read_table(s);
    const std::string why = table_problem(t, gen, s, h.table_checksum);
    if (!why.empty()) fail_data("generation " + std::to_string(gen) + ": slot " + std::to_string(s) + " " + why);
    return table_hashes(t);
  }

  // Compares hashes of buffer i's units with the table of `generation`
  // (in slot generation % 2); throws naming the first mismatch.
  void compare(size_t i, const uint64_t* got, const std::vector<uint64_t>& want, uint64_t first_unit_of_chunk,
               uint64_t n, const std::string& after, uint64_t generation) const {
    uint64_t bad = 0, first = 0;
    for (uint64_t k = 0; k < n; ++k)
      if (got[k] != want[lay.first_unit[i] + first_unit_of_chunk + k] && bad++ == 0) first = first_unit_of_chunk + k;
    if (!bad) return;
    const tensor_spec& t = manifest[i];
    const uint64_t lo = first * unit, hi = std::min<uint64_t>(t.bytes, lo + unit);
    const uint32_t s = generation % 2;
    fail_data("generation " + std::to_string(generation) + ", buffer '" + t.name + "': unit " + std::to_string(first) +
         " (bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of the buffer, at byte " +
         std::to_string(lay.slot_offset[s] + lay.offset[i] + lo) + " of slot " + std::to_string(s) +
         ") does not match its checksum" + (bad > 1 ? " (nor do " + std::to_string(bad - 1) + " more units)" : "") +
         ": the slot is corrupt" + after);
  }

  // Memory to read slot bytes into before hashing them: device memory for a
  // GPU cache (its kernels copy into device memory), else host memory; at
  // most 64 MiB (a whole number of units).
  struct scratch {
    const impl& st;
    uint64_t bytes;
    memory_kind kind;
    std::vector<uint8_t> host;
    void* dev = nullptr;
    uint64_t dev_bytes = 0;
    void* p = nullptr;
    explicit scratch(const impl& s)
        : st(s), bytes(std::max<uint64_t>(s.unit, (64ull << 20) / s.unit * s.unit)),
          kind(s.cache->on_gpu() ? memory_kind::device : memory_kind::host) {}
    ~scratch() {
      if (dev) st.opts.gpu->free(dev);
    }
    // At least n (<= bytes) bytes.
    void* get(uint64_t n) {
      if (kind == memory_kind::host) {
        if (host.size() < n) host.resize(n);
        return p = host.data();
      }
      if (dev_bytes < n) {
        checkpoint_gpu& g = st.gpu("a GPU page cache");
        if (dev) g.free(dev);
        dev = nullptr;
        dev = g.alloc(n);
        dev_bytes = n;
      }
      return p = dev;
    }
  };

  // Reads every selected buffer's units of `generation` (in slot
  // generation % 2) into scratch and checks them against `want`.
  void verify_data(const std::vector<uint64_t>& want, const std::vector<bool>& which, uint64_t generation) {
    const uint32_t s = generation % 2;
    scratch buf(*this);
    std::vector<uint64_t> h;
    for (size_t i = 0; i < manifest.size(); ++i) {
      if (!which[i]) continue;
      const tensor_spec& t = manifest[i];
      for (uint64_t o = 0; o < t.bytes; o += buf.bytes) {
        const uint64_t n = std::min(buf.bytes, t.bytes - o);
        need_ok(move(buf.get(n), buf.kind, {{0, lay.slot_offset[s] + lay.offset[i] + o, n}}, false, "verify"),
                "generation " + std::to_string(generation) + ": reading buffer '" + t.name + "'");
        h.assign(units_of(n, unit), 0);
        hash_into({buf.p, n, buf.kind}, h.data());
        compare(i, h.data(), want, o / unit, h.size(), "", generation);
      }
    }
  }
};

checkpoint_store::checkpoint_store(std::unique_ptr<impl> p) : p_(std::move(p)) {}
checkpoint_store::~checkpoint_store() = default;

namespace {

std::unique_ptr<checkpoint_store::impl> start(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                              checkpoint_options opts) {
  if (!cache) throw error("checkpoint store: no page cache");
  auto p = std::make_unique<checkpoint_store::impl>();
  p->cache = std::move(cache);
  p->nsid = nsid;
  p->opts = std::move(opts);
  p->label = p->opts.label;
  if (p->label.empty()) {
    try {
      p->label = p->cache->link().info(nsid).description;
    } catch (const std::exception&) {
    }
    p->label = "'" + p->label + "' (namespace " + std::to_string(nsid) + ")";
  } else {
    p->label = "'" + p->label + "'";
  }
  try {
    p->arr = std::make_unique<array<uint8_t>>(p->cache, nsid);
  } catch (const error& e) {
    p->fail(e.what());
  }
  p->ref = p->arr->ref();
  if (p->cache->on_gpu() && !p->opts.gpu)
    p->fail("a GPU page cache needs GPU support: pass checkpoint_options::gpu = deepwell::gpu_checkpoint_support() "
            "(deepwell_cuda)");
  return p;
}

}  // namespace

uint64_t checkpoint_store::bytes_needed(const checkpoint_manifest& manifest, uint32_t unit) {
  check_manifest_shape(manifest);
  if (unit < 512 || unit > 65536 || (unit & (unit - 1)))
    throw error("checkpoint store: unit " + std::to_string(unit) + " is not a power of two from 512 to 65536");
  return make_layout(manifest, unit).store_bytes;
}

std::unique_ptr<checkpoint_store> checkpoint_store::create(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                           checkpoint_manifest manifest, checkpoint_options opts) {
  auto p = start(std::move(cache), nsid, std::move(opts));
  try {
    check_manifest_shape(manifest);
  } catch (const error& e) {
    p->fail(e.what());
  }
  p->unit = p->opts.unit ? p->opts.unit : std::max<uint32_t>(512, p->cache->page_size());
  if (p->unit < 512 || p->unit > 65536 || (p->unit & (p->unit - 1)))
    p->fail("unit " + std::to_string(p->unit) + " is not a power of two from 512 to 65536");
  if (p->ref.read_only) p->fail("the namespace is read-only: a store cannot be created on it");
  p->manifest = std::move(manifest);
  p->lay = make_layout(p->manifest, p->unit);
  if (p->lay.store_bytes > p->arr->size())
    p->fail("the namespace has " + std::to_string(p->arr->size()) + " bytes; a store of this manifest needs " +
            std::to_string(p->lay.store_bytes));
  p->manifest_image = encode_manifest(p->manifest, p->lay.offset);
  p->manifest_checksum = hash_of(p->manifest_image.data(), p->manifest_image.size(), seed_manifest);
  std::random_device rd;
  for (int i = 0; i < 16; i += 4) {
    const uint32_t r = rd();
    std::memcpy(p->store_id + i, &r, 4);
  }
  // 1. Both copies blank, durably: nothing of a store that was here before
  //    can be taken for this one's from now on.
  uint8_t zero[header_size] = {};
  for (uint32_t c = 0; c < 2; ++c) p->io(zero, c * region, header_size, true, "blanking the superblocks");
  p->persist(0, 2 * region, "blanking the superblocks");
  // 2. The manifest, durably; 3. generation 0 in copy 0, durably: a valid
  //    superblock never names a manifest that is not on the disk.
  p->io(p->manifest_image.data(), p->lay.manifest_offset, p->manifest_image.size(), true, "writing the manifest");
  p->persist(p->lay.manifest_offset, p->manifest_image.size(), "writing the manifest");
  const sb_header h = p->make_header(0, 0, 0);
  p->io(const_cast<sb_header*>(&h), 0, header_size, true, "writing the superblock");
  p->persist(0, header_size, "writing the superblock");
  std::memcpy(p->raw[0], &h, header_size);
  std::memset(p->raw[1], 0, header_size);
  p->gen = 0;
  return std::make_unique<checkpoint_store>(std::move(p));
}

std::unique_ptr<checkpoint_store> checkpoint_store::open(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                         checkpoint_options opts) {
  auto p = start(std::move(cache), nsid, std::move(opts));
  // Too small for the superblocks: say so, rather than fail reading them.
  const uint64_t have = p->arr->size();
  if (have == 0) p->fail_data("the namespace is empty (0 bytes): not a deepwell checkpoint store");
  if (have < region + header_size)
    p->fail_data("the namespace has " + std::to_string(have) + " bytes, too few for the superblocks (" +
                 std::to_string(region + header_size) + "): not a deepwell checkpoint store");
  uint8_t hdrs[2][header_size];
  p->read_headers(hdrs);
  p->adopt(hdrs, false);
  return std::make_unique<checkpoint_store>(std::move(p));
}

std::unique_ptr<checkpoint_store> checkpoint_store::open(std::shared_ptr<page_cache> cache, uint32_t nsid,
                                                         const checkpoint_manifest& expected,
                                                         checkpoint_options opts) {
  auto s = open(std::move(cache), nsid, std::move(opts));
  s->check_manifest(expected);
  return s;
}

const checkpoint_manifest& checkpoint_store::manifest() const { return p_->manifest; }
uint64_t checkpoint_store::generation() const { return p_->gen; }
const std::string& checkpoint_store::label() const { return p_->label; }
uint32_t checkpoint_store::unit() const { return p_->unit; }

void checkpoint_store::check_manifest(const checkpoint_manifest& expected) const {
  const checkpoint_manifest& m = p_->manifest;
  std::map<std::string, size_t> have;
  for (size_t i = 0; i < m.size(); ++i) have[m[i].name] = i;
  std::map<std::string, size_t> want;
  for (size_t i = 0; i < expected.size(); ++i) want[expected[i].name] = i;
  for (const auto& [name, i] : want)
    if (!have.count(name))
      p_->fail("the manifest differs: it has no buffer '" + name + "' (expected " + spec_text(expected[i]) + "; it has " +
               std::to_string(m.size()) + " buffers)");
  for (const auto& [name, i] : have)
    if (!want.count(name)) p_->fail("the manifest differs: it has a buffer " + spec_text(m[i]) + " not expected");
  for (size_t i = 0; i < expected.size(); ++i) {
    const tensor_spec& e = expected[i];
    const tensor_spec& g = m[have[e.name]];
    if (g.bytes != e.bytes)
      p_->fail("the manifest differs: '" + e.name + "' has " + std::to_string(g.bytes) + " bytes, expected " +
               std::to_string(e.bytes));
    if (g.dtype != e.dtype)
      p_->fail("the manifest differs: '" + e.name + "' has dtype '" + g.dtype + "', expected '" + e.dtype + "'");
    if (g.shape != e.shape)
      p_->fail("the manifest differs: '" + e.name + "' has shape " + shape_text(g.shape) + ", expected " +
               shape_text(e.shape));
  }
  for (size_t i = 0; i < expected.size(); ++i)
    if (m[i].name != expected[i].name)
      p_->fail("the manifest differs: the buffers are in another order (position " + std::to_string(i) + " holds '" +
               m[i].name + "', expected '" + expected[i].name + "')");
}

save_report checkpoint_store::save(const checkpoint_buffers& buffers) {
  impl& p = *p_;
  const auto t0 = std::chrono::steady_clock::now();
  if (p.ref.read_only) p.fail("save: the namespace is read-only");
  const std::vector<const checkpoint_buffer*> src = p.match(buffers, false, "save");
  p.sync();
  const uint64_t g = p.gen + 1;
  const uint32_t s = uint32_t(g % 2);
  save_report rep;
  rep.generation = g;
  rep.slot = s;
  rep.units_total = p.lay.units;
  for (const tensor_spec& t : p.manifest) rep.data_bytes += t.bytes;
  const std::string what = "save of generation " + std::to_string(g);
  try {
    // 1. Hashes of every unit (the device buffers' in one batch).
    auto t = std::chrono::steady_clock::now();
    std::vector<uint64_t> now(p.lay.units);
    p.hash_all(src, now);
    rep.hash_seconds = seconds_since(t);
    // 2. Copy s blanked, durably, before the slot changes: an intact copy
    //    vouches for its slot (adopt trusts it after a restart), and a copy
    //    that is neither intact nor blank is taken for a damaged superblock
    //    (adopt refuses it), so a crash from here to step 6 must leave it blank.
    if (!is_blank(p.raw[s])) {
      uint8_t zero[header_size] = {};
      p.io(zero, s * region, header_size, true, what + ": invalidating superblock copy " + std::to_string(s));
      p.persist(s * region, header_size, what + ": invalidating superblock copy " + std::to_string(s));
      std::memcpy(p.raw[s], zero, header_size);
      rep.bytes_written += header_size;
    }
    // 3. The units that differ from what slot s holds into it, a chunk at a
    //    time; the write-back of each chunk (persist) runs while the next
    //    one is copied, and the last chunk's is left to step 5.
    rep.incremental = p.known[s];
    const bool all = !p.known[s];
    t = std::chrono::steady_clock::now();
    const std::vector<uint8_t> write = p.units_to_write(s, now, what);
    rep.hash_seconds += seconds_since(t);
    p.known[s] = false;
    t = std::chrono::steady_clock::now();
    std::vector<std::vector<checkpoint_run>> runs(p.manifest.size());
    for (size_t i = 0; i < p.manifest.size(); ++i) {
      uint64_t changed = 0;
      runs[i] = p.changed_runs(i, s, write, changed);
      rep.units_written += changed;
      for (const checkpoint_run& r : runs[i]) rep.bytes_written += r.bytes;
    }
    p.write_pipelined(src, runs, what);
    // 4. The slot's table: the units of it that differ from the table
    //    stored in the slot (read back, as the data was).
    std::vector<uint8_t> tab = p.make_table(g, s, now);
    std::vector<checkpoint_run> truns;
    std::vector<uint8_t> old;
    if (!all) old = p.read_table(s);
    for (uint64_t o = 0; o < tab.size(); o += p.unit) {
      const uint64_t n = std::min<uint64_t>(p.unit, tab.size() - o);
      if (!all && std::memcmp(old.data() + o, tab.data() + o, n) == 0) continue;
      if (!truns.empty() && truns.back().mem + truns.back().bytes == o)
        truns.back().bytes += n;
      else
        truns.push_back({o, p.lay.slot_offset[s] + p.lay.table_offset + o, n});
      rep.bytes_written += n;
    }
    p.need_ok(p.move(tab.data(), memory_kind::host, truns, true, "the table"), what + ": writing the table");
    rep.copy_seconds = seconds_since(t);
    // 5. The slot durable.
    t = std::chrono::steady_clock::now();
    p.persist(p.lay.slot_offset[s], p.lay.slot_stride, what + ": persisting slot " + std::to_string(s));
    // 6. The superblock naming it, durable: from here on it is the newest.
    p.uncertain = true;  // until this copy is known durable
    const sb_header h = p.make_header(g, s, hash_of(tab.data(), tab.size(), seed_table));
    p.io(const_cast<sb_header*>(&h), s * region, header_size, true, what + ": writing superblock copy " + std::to_string(s));
    p.persist(s * region, header_size, what + ": persisting superblock copy " + std::to_string(s));
    rep.persist_seconds = seconds_since(t);
    rep.bytes_written += header_size;
    std::memcpy(p.raw[s], &h, header_size);
    p.gen = g;
    p.hashes[s] = std::move(now);
    p.known[s] = true;
    p.uncertain = false;
  } catch (...) {
    // The slot's contents and the copies on the disk are no longer known:
    // the next call makes the superblocks durable and reads them again.
    p.known[s] = false;
    p.uncertain = true;
    throw;
  }
  rep.seconds = seconds_since(t0);
  return rep;
}

void checkpoint_store::load(const checkpoint_buffers& buffers, const load_options& opts) {
  impl& p = *p_;
  const std::vector<const checkpoint_buffer*> dst = p.match(buffers, opts.partial, "load");
  p.sync();
  const std::vector<uint64_t> want = p.checked_table();
  if (opts.verify_first) {
    std::vector<bool> which(p.manifest.size());
    for (size_t i = 0; i < which.size(); ++i) which[i] = dst[i] != nullptr;
    p.verify_data(want, which, p.gen);
  }
  const uint32_t s = uint32_t(p.gen % 2);
  const std::string after = opts.verify_first ? "" : "; the buffers may be partly overwritten";
  std::vector<uint64_t> h;
  for (size_t i = 0; i < p.manifest.size(); ++i) {
    if (!dst[i] || !dst[i]->bytes) continue;
    const tensor_spec& t = p.manifest[i];
    p.need_ok(p.move(dst[i]->data, dst[i]->where, {{0, p.lay.slot_offset[s] + p.lay.offset[i], t.bytes}}, false,
                     "buffer '" + t.name + "'"),
              "load of generation " + std::to_string(p.gen) + ": reading buffer '" + t.name + "'" + after);
    h.assign(units_of(t.bytes, p.unit), 0);
    p.hash_into(*dst[i], h.data());
    p.compare(i, h.data(), want, 0, h.size(), after, p.gen);
  }
}

void checkpoint_store::verify() {
  impl& p = *p_;
  p.sync();
  const std::vector<uint64_t> want = p.checked_table();
  p.verify_data(want, std::vector<bool>(p.manifest.size(), true), p.gen);
}

}  // namespace deepwell
