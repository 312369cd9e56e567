// The write-ahead log's host side (include/deepwell/durable/log.hpp): the
// header (create, open, the epoch's advance), recovery and checkpoints.
// The host reaches the log's namespace through a queue pair of its own on
// the cache's controller link, never through the cache: a GPU cache's pages
// are not host memory, and the header region (the first 64 KiB) is never
// in the cache, so nothing the cache holds can go stale under these writes.
#include "deepwell/durable/log.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "deepwell/common/error.hpp"
#include "deepwell/link/host_client.hpp"
#include "common/disk_header.hpp"

namespace deepwell::durable {

namespace {

namespace lf = log_format;
using lf::header;

constexpr uint64_t io_chunk = 64 << 10;  // bytes per command (the queue pair's slot)

uint32_t header_checksum(const header& h) { return detail::sealed_sum(h, 0x243F6A8885A308D3ull); }

bool magic_ok(const header& h) { return detail::magic_matches(h, lf::magic); }
bool header_ok(const header& h) {
  return magic_ok(h) && h.version == lf::version && h.checksum == header_checksum(h);
}

const char* form_name(uint32_t f) {
  return f == uint32_t(log_form::redo) ? "redo" : f == uint32_t(log_form::undo) ? "undo" : "unknown";
}

std::string arrays_text(const std::vector<log_array>& a) {
  std::string s;
  for (size_t i = 0; i < a.size(); ++i)
    s += (i ? ", " : "") + std::to_string(a[i].n) + " x " + std::to_string(a[i].elem_bytes) + " B";
  return "[" + s + "]";
}

}  // namespace

struct write_ahead_log::impl {
  std::shared_ptr<page_cache> cache;
  uint32_t nsid = 0;
  namespace_info info;
  std::unique_ptr<array<uint32_t>> words;  // registers the log's dataset with the cache
  std::unique_ptr<host_queue_client> io;
  std::vector<log_array> arrays;
  header copies[2]{};  // the bytes of each header copy as on disk (one may be invalid)
  int current = 0;     // the copy that holds hdr
  header hdr{};
  bool other_copy_bad = false;  // the copy that is not `current` failed its checks
  std::string tag;
  bool recovered = false;

  std::string name() const {
    return "log on namespace " + std::to_string(nsid) + " (" + info.description + ")";
  }
  [[noreturn]] void fail(const std::string& what) const { throw error(name() + ": " + what); }

  void connect(std::shared_ptr<page_cache> c, uint32_t ns) {
    if (!c) throw error("write_ahead_log: no cache");
    cache = std::move(c);
    nsid = ns;
    info = cache->link().info(nsid);
    io = std::make_unique<host_queue_client>(cache->link().open_queue_pair(qp_geometry{8, 8, uint32_t(io_chunk)}));
  }

  void take_arrays(const std::vector<log_data>& data) {
    if (data.size() > lf::max_arrays)
      fail(std::to_string(data.size()) + " data arrays, at most " + std::to_string(lf::max_arrays));
    for (size_t i = 0; i < data.size(); ++i) {
      const log_data& d = data[i];
      if (d.cache != cache.get()) fail("data array " + std::to_string(i) + " is in another cache than the log");
      const dataset_desc& ds = cache->dataset(d.desc.dataset);
      if (ds.read_only) fail("data array " + std::to_string(i) + " (namespace " + std::to_string(ds.nsid) + ") is read-only");
      arrays.push_back(d.desc);
    }
  }

  // ---- raw I/O on a namespace (whole blocks) ----
  void read_bytes(uint32_t ns, uint32_t bs, uint64_t offset, uint64_t bytes, void* dst) const {
    auto* p = static_cast<uint8_t*>(dst);
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(io_chunk, bytes - done);
      const request_status s = io->read(ns, (offset + done) / bs, uint32_t(n / bs), bs, p + done);
      if (!s.ok())
        fail("read of namespace " + std::to_string(ns) + " at byte " + std::to_string(offset + done) + ": " + describe(s));
      done += n;
    }
  }
  void write_bytes(uint32_t ns, uint32_t bs, uint64_t offset, uint64_t bytes, const void* src) const {
    const auto* p = static_cast<const uint8_t*>(src);
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(io_chunk, bytes - done);
      const request_status s = io->write(ns, (offset + done) / bs, uint32_t(n / bs), bs, p + done);
      if (!s.ok())
        fail("write of namespace " + std::to_string(ns) + " at byte " + std::to_string(offset + done) + ": " +
             describe(s));
      done += n;
    }
  }
  void flush_ns(uint32_t ns) const {
    const request_status s = io->flush(ns);
    if (!s.ok()) fail("flush of namespace " + std::to_string(ns) + ": " + describe(s));
  }

  // Both header copies live in the first header_span bytes.
  uint64_t header_span() const { return std::max<uint64_t>(2 * lf::header_copy_stride, info.block_size); }

  void write_copies() {
    std::vector<uint8_t> img(header_span(), 0);
    for (int k = 0; k < 2; ++k) std::memcpy(img.data() + k * lf::header_copy_stride, &copies[k], sizeof(header));
    write_bytes(nsid, info.block_size, 0, img.size(), img.data());
    flush_ns(nsid);
  }

  // A new header into the copy that does not hold the current one; durable
  // when this returns. A failure leaves the current copy as it was.
  void advance(uint64_t epoch, bool checkpoint) {
    header h = hdr;
    h.seq = hdr.seq + 1;
    h.epoch = epoch;
    if (checkpoint) ++h.checkpoints;
    h.checksum = header_checksum(h);
    const int k = 1 - current;
    const header keep = copies[k];
    copies[k] = h;
    try {
      write_copies();
    } catch (...) {
      copies[k] = keep;
      throw;
    }
    current = k;
    hdr = h;
  }

  // The record of (partition p, row, lane) in the rows read from the log
  // (w: every row, lanes striped across each row's lines).
  lf::record record_at(const std::vector<uint32_t>& w, uint32_t p, uint32_t row, uint32_t lane) const {
    lf::record r;
    const uint64_t base = (uint64_t(p) * hdr.rows + row) * lf::row_words + lane;
    for (uint32_t j = 0; j < lf::entry_words; ++j) r.w[j] = w[base + uint64_t(j) * lf::lanes];
    return r;
  }

  // Whether any record of `epoch` is in the rows read from the log.
  bool has_records(const std::vector<uint32_t>& w, uint64_t epoch) const {
    for (uint32_t p = 0; p < hdr.partitions; ++p)
      for (uint32_t row = 0; row < hdr.rows; ++row)
        for (uint32_t lane = 0; lane < lf::lanes; ++lane)
          if (record_at(w, p, row, lane).valid(lf::record_seed(hdr.nonce, epoch, p, row, lane))) return true;
    return false;
  }

  void attach_words() {
    if (info.block_size > cache->page_size())
      fail("block size " + std::to_string(info.block_size) + " is larger than the cache's page size " +
           std::to_string(cache->page_size()));
    words = std::make_unique<array<uint32_t>>(cache, nsid);
  }

  log_ref make_ref() const {
    log_ref r;
    r.cache_ = cache->ref();
    r.log_dataset_ = words->ref().dataset;
    r.form_ = hdr.form;
    r.log_words_ = hdr.log_bytes / 4;
    r.partitions_ = hdr.partitions;
    r.rows_ = hdr.rows;
    r.nonce_ = hdr.nonce;
    r.epoch_ = hdr.epoch;
    r.narrays_ = uint32_t(arrays.size());
    for (size_t i = 0; i < arrays.size(); ++i) r.arrays_[i] = arrays[i];
    return r;
  }
};

write_ahead_log::write_ahead_log(std::unique_ptr<impl> p) : p_(std::move(p)) {}
write_ahead_log::write_ahead_log(write_ahead_log&&) noexcept = default;
write_ahead_log& write_ahead_log::operator=(write_ahead_log&&) noexcept = default;
write_ahead_log::~write_ahead_log() = default;

write_ahead_log write_ahead_log::create(std::shared_ptr<page_cache> cache, uint32_t log_nsid,
                                        const std::vector<log_data>& data, const log_config& cfg) {
  auto p = std::make_unique<impl>();
  p->connect(std::move(cache), log_nsid);
  if (cfg.form != log_form::redo && cfg.form != log_form::undo)
    p->fail("unknown log form " + std::to_string(uint32_t(cfg.form)));
  if (cfg.partitions == 0) p->fail("a log needs at least one partition");
  if (cfg.rows < 2 || cfg.rows > (1u << 24))
    p->fail(std::to_string(cfg.rows) + " rows per partition (2 to 16M: a transaction needs a row for its entries and one for its commit)");
  if (cfg.tag.size() > lf::max_tag_bytes)
    p->fail("tag of " + std::to_string(cfg.tag.size()) + " bytes, at most " + std::to_string(lf::max_tag_bytes));
  if (p->info.read_only) p->fail("the namespace is read-only");
  const uint64_t need = lf::log_bytes(cfg.partitions, cfg.rows);
  if (p->info.bytes < need)
    p->fail("the namespace has " + std::to_string(p->info.bytes) + " bytes; a log of " + std::to_string(cfg.partitions) +
            " partitions x " + std::to_string(cfg.rows) + " rows needs " + std::to_string(need));
  p->take_arrays(data);
  p->attach_words();

  header h;
  detail::stamp_header(h, lf::magic, lf::version);
  h.form = uint32_t(cfg.form);
  h.nonce = detail::fresh_nonce();
  h.epoch = 1;
  h.partitions = cfg.partitions;
  h.rows = cfg.rows;
  h.log_bytes = need;
  h.narrays = uint32_t(p->arrays.size());
  for (size_t i = 0; i < p->arrays.size(); ++i) {
    h.arrays[i].elems = p->arrays[i].n;
    h.arrays[i].elem_bytes = p->arrays[i].elem_bytes;
  }
  std::memcpy(h.tag, cfg.tag.data(), cfg.tag.size());
  h.seq = 1;
  h.checksum = header_checksum(h);
  p->copies[1] = h;
  h.seq = 2;
  h.checksum = header_checksum(h);
  p->copies[0] = h;
  p->write_copies();
  p->current = 0;
  p->hdr = h;
  p->tag = cfg.tag;
  p->recovered = true;
  return write_ahead_log(std::move(p));
}

write_ahead_log write_ahead_log::open(std::shared_ptr<page_cache> cache, uint32_t log_nsid,
                                      const std::vector<log_data>& data, const std::string& tag) {
  auto p = std::make_unique<impl>();
  p->connect(std::move(cache), log_nsid);
  if (p->info.bytes < p->header_span())
    p->fail("the namespace has " + std::to_string(p->info.bytes) + " bytes, too few to hold a log header (" +
            std::to_string(p->header_span()) + ")");
  std::vector<uint8_t> img(p->header_span());
  p->read_bytes(log_nsid, p->info.block_size, 0, img.size(), img.data());
  for (int k = 0; k < 2; ++k) std::memcpy(&p->copies[k], img.data() + k * lf::header_copy_stride, sizeof(header));
  const bool ok0 = header_ok(p->copies[0]), ok1 = header_ok(p->copies[1]);
  if (!ok0 && !ok1) {
    if (!magic_ok(p->copies[0]) && !magic_ok(p->copies[1])) p->fail("no log header (not a deepwell log)");
    for (int k = 0; k < 2; ++k)
      if (magic_ok(p->copies[k]) && p->copies[k].version != lf::version)
        p->fail("log format version " + std::to_string(p->copies[k].version) + ", this build reads version " +
                std::to_string(lf::version));
    p->fail("corrupted header (both copies fail their checksum)");
  }
  p->current = ok0 && (!ok1 || p->copies[0].seq > p->copies[1].seq) ? 0 : 1;
  p->other_copy_bad = ok0 != ok1;
  const header& h = p->copies[p->current];
  p->hdr = h;
  p->tag.assign(h.tag, strnlen(h.tag, sizeof(h.tag)));
  if (p->tag != tag) p->fail("the log belongs to '" + p->tag + "', not to '" + tag + "'");
  if (h.form != uint32_t(log_form::redo) && h.form != uint32_t(log_form::undo))
    p->fail("unknown log form " + std::to_string(h.form) + " in the header");
  if (h.partitions == 0 || h.rows < 2 || h.log_bytes != lf::log_bytes(h.partitions, h.rows))
    p->fail("header geometry does not add up (" + std::to_string(h.partitions) + " partitions x " +
            std::to_string(h.rows) + " rows, " + std::to_string(h.log_bytes) + " bytes)");
  if (p->info.bytes < h.log_bytes)
    p->fail("truncated: the header says the log has " + std::to_string(h.log_bytes) + " bytes, the namespace has " +
            std::to_string(p->info.bytes));
  p->take_arrays(data);
  std::vector<log_array> want;
  for (uint32_t i = 0; i < std::min<uint32_t>(h.narrays, lf::max_arrays); ++i)
    want.push_back(log_array{0, h.arrays[i].elem_bytes, h.arrays[i].elems});
  bool same = want.size() == p->arrays.size();
  for (size_t i = 0; same && i < want.size(); ++i)
    same = want[i].n == p->arrays[i].n && want[i].elem_bytes == p->arrays[i].elem_bytes;
  if (!same)
    p->fail("the log covers data arrays " + arrays_text(want) + ", it was opened with " + arrays_text(p->arrays));
  p->attach_words();
  return write_ahead_log(std::move(p));
}

recovery_result write_ahead_log::recover() {
  impl& m = *p_;
  recovery_result out;
  const request_status c = m.cache->clear();
  if (!c.ok()) m.fail("recovery: emptying the cache failed: " + describe(c));

  // Every row of every partition.
  const uint64_t first_byte = lf::partitions_offset(m.hdr.partitions);
  const uint64_t rows_total = uint64_t(m.hdr.partitions) * m.hdr.rows;
  std::vector<uint32_t> w(lf::round_up(rows_total * lf::row_bytes, lf::region_align) / 4);
  m.read_bytes(m.nsid, m.info.block_size, first_byte, w.size() * 4, w.data());

  // A damaged copy may have been the newer header: an advance writes the
  // other copy with the next epoch, and records of an epoch are written
  // only once its header is durable. So records that are valid for the
  // next epoch prove that header existed; its records are the ones to
  // replay (the advance to it came after its predecessor's records were
  // applied and flushed).
  if (m.other_copy_bad) {
    out.header_copy_damaged = true;
    if (m.has_records(w, m.hdr.epoch + 1)) {
      header h = m.hdr;
      h.epoch = m.hdr.epoch + 1;
      h.seq = m.hdr.seq + 1;
      h.checksum = header_checksum(h);
      m.current = 1 - m.current;
      m.copies[m.current] = h;
      m.hdr = h;
      out.header_epoch_inferred = true;
    }
  }
  const header& h = m.hdr;
  out.epoch = h.epoch;

  struct entry {
    uint32_t row, lane, array;
    uint64_t index, value;
  };
  struct tx {
    uint32_t partition = 0;
    bool ended = false;
    lf::record end{};
    std::vector<entry> entries;
  };
  std::unordered_map<uint64_t, tx> txs;
  const uint32_t entry_kind = h.form == uint32_t(log_form::redo) ? lf::redo_entry : lf::undo_entry;
  for (uint32_t p = 0; p < h.partitions; ++p)
    for (uint32_t row = 0; row < h.rows; ++row)
      for (uint32_t lane = 0; lane < lf::lanes; ++lane) {
        const lf::record r = m.record_at(w, p, row, lane);
        if (!r.valid(lf::record_seed(h.nonce, h.epoch, p, row, lane))) continue;
        ++out.records;
        const std::string where = "partition " + std::to_string(p) + " row " + std::to_string(row) + " lane " +
                                  std::to_string(lane);
        auto [it, fresh] = txs.try_emplace(r.txid());
        tx& t = it->second;
        if (fresh) t.partition = p;
        if (t.partition != p)
          m.fail("transaction " + std::to_string(r.txid()) + " has records in partitions " + std::to_string(t.partition) +
                 " and " + std::to_string(p) + " (txids must be unique in an epoch)");
        if (r.is_end()) {
          if (r.end_row() != row || r.first_row() > row)
            m.fail("corrupted end record at " + where);
          if (t.ended && std::memcmp(&t.end, &r, sizeof(r) - 4) != 0)
            m.fail("transaction " + std::to_string(r.txid()) + " has two different end records (at " + where + ")");
          t.ended = true;
          t.end = r;
        } else if (r.kind_of() == entry_kind) {
          if (r.array() >= m.arrays.size() || r.index() >= m.arrays[r.array()].n)
            m.fail("entry at " + where + " names element " + std::to_string(r.index()) + " of data array " +
                   std::to_string(r.array()) + ", which the log's arrays " + arrays_text(m.arrays) + " do not have");
          t.entries.push_back(entry{row, lane, r.array(), r.index(), r.value()});
        } else {
          // Its words, so that a report tells a checksum that passed by
          // chance (2^-32 a slot: zeros, or a torn mix) from a real record.
          char words[8 * 9 + 1] = {};
          for (uint32_t j = 0; j < lf::entry_words; ++j) std::snprintf(words + 9 * j, 10, " %08x", r.w[j]);
          m.fail("a record of kind " + std::to_string(r.kind_of()) + " in a " + form_name(h.form) + " log at " + where +
                 " (words" + words + ")");
        }
      }

  // Which transactions count, and checks of the committed ones.
  std::vector<std::pair<uint64_t, tx*>> todo;
  for (auto& [id, t] : txs) {
    const bool committed = t.ended && t.end.kind_of() == lf::commit_record;
    if (t.ended) (committed ? out.committed : out.aborted) += 1;
    if (committed) {
      uint64_t inside = 0;
      for (const entry& e : t.entries) inside += e.row >= t.end.first_row() && e.row < t.end.end_row();
      if (inside != t.end.count() || inside != t.entries.size())
        m.fail("transaction " + std::to_string(id) + " (partition " + std::to_string(t.partition) + ") committed with " +
               std::to_string(t.end.count()) + " entries, " + std::to_string(inside) +
               " of them readable: the log is corrupted");
    }
    if (h.form == uint32_t(log_form::redo)) {
      if (committed)
        todo.emplace_back(id, &t);
      else
        ++out.discarded;
    } else if (!t.ended) {
      todo.emplace_back(id, &t);
    }
  }
  const bool redo = h.form == uint32_t(log_form::redo);
  std::sort(todo.begin(), todo.end(), [&](const auto& a, const auto& b) { return redo ? a.first < b.first : a.first > b.first; });
  (redo ? out.replayed : out.rolled_back) = todo.size();

  // The writes, in order, gathered by block.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> blocks;  // (array, lba) -> block
  for (auto& [id, t] : todo) {
    // Redo: oldest row first; undo: newest first, so an element logged
    // twice ends with its oldest value.
    std::sort(t->entries.begin(), t->entries.end(), [&](const entry& a, const entry& b) {
      const uint64_t ka = uint64_t(a.row) << 32 | a.lane, kb = uint64_t(b.row) << 32 | b.lane;
      return redo ? ka < kb : ka > kb;
    });
    for (const entry& e : t->entries) {
      const log_array& a = m.arrays[e.array];
      const dataset_desc& d = m.cache->dataset(a.dataset);
      const uint64_t byte = e.index * a.elem_bytes;
      const uint64_t lba = byte / d.block_size;
      auto [it, fresh] = blocks.try_emplace({e.array, lba});
      if (fresh) {
        it->second.resize(d.block_size);
        m.read_bytes(d.nsid, d.block_size, lba * d.block_size, d.block_size, it->second.data());
      }
      uint8_t* q = it->second.data() + (byte - lba * d.block_size);
      if (a.elem_bytes == 8)
        std::memcpy(q, &e.value, 8);
      else {
        const uint32_t v = uint32_t(e.value);
        std::memcpy(q, &v, 4);
      }
      ++out.elements_written;
    }
  }
  std::vector<bool> touched(m.arrays.size(), false);
  for (const auto& [key, b] : blocks) {
    const dataset_desc& d = m.cache->dataset(m.arrays[key.first].dataset);
    m.write_bytes(d.nsid, d.block_size, key.second * d.block_size, d.block_size, b.data());
    touched[key.first] = true;
  }
  for (size_t i = 0; i < m.arrays.size(); ++i)
    if (touched[i]) m.flush_ns(m.cache->dataset(m.arrays[i].dataset).nsid);
  // Truncate: the records of this epoch are done with. (Both copies are
  // written, so a damaged one is replaced.)
  m.advance(h.epoch + 1, false);
  out.new_epoch = m.hdr.epoch;
  m.recovered = true;
  return out;
}

void write_ahead_log::checkpoint() {
  impl& m = *p_;
  if (!m.recovered) m.fail("checkpoint before recover()");
  const request_status s = m.cache->flush();
  if (!s.ok()) m.fail("checkpoint: writing back the cache failed: " + describe(s));
  m.advance(m.hdr.epoch + 1, true);
}

void write_ahead_log::check_launch(uint64_t warps) const {
  if (warps > p_->hdr.partitions)
    p_->fail("a launch of " + std::to_string(warps) + " warps needs as many partitions; the log has " +
             std::to_string(p_->hdr.partitions));
}

log_ref write_ahead_log::ref() const {
  if (!p_->recovered) p_->fail("opened but not recovered: call recover() before ref()");
  return p_->make_ref();
}

log_form write_ahead_log::form() const { return log_form(p_->hdr.form); }
uint32_t write_ahead_log::partitions() const { return p_->hdr.partitions; }
uint32_t write_ahead_log::rows() const { return p_->hdr.rows; }
uint64_t write_ahead_log::epoch() const { return p_->hdr.epoch; }
const std::string& write_ahead_log::tag() const { return p_->tag; }
std::string write_ahead_log::name() const { return p_->name(); }

}  // namespace deepwell::durable
