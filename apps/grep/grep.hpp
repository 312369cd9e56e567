// Whole-word grep of a dictionary over many files, through the file API:
// each warp (or CPU thread) takes the next file, opens it, reads it in
// chunks, counts the dictionary words it holds as whole words, closes it,
// and writes "count<TAB>word<TAB>path" lines through the file API to an
// output file. A word is a maximal run of ASCII letters, digits and '_'
// (every other byte separates words): the words of ripgrep's -w with
// --no-unicode, which is how the results are checked against ripgrep.
//
// A (word, path) pair appears on one line, except in files with more
// distinct dictionary words than half a warp's table holds and in files
// counted in pieces by several workers (larger than grep_piece_bytes),
// whose counts may come in several lines: readers sum them
// (tools/grep_command.cpp does).
#pragma once
#include <cstdint>

#include "deepwell/files/gfs_ref.hpp"

namespace deepwell {

DW_HD inline bool grep_word_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

DW_HD inline uint64_t grep_hash(const uint8_t* p, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (uint32_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

// The dictionary in client memory: words back to back in `blob`, word i at
// [offs[i], offs[i + 1]); an open-addressing table of word index + 1.
struct grep_dict_ref {
  const uint8_t* blob = nullptr;
  const uint32_t* offs = nullptr;
  const uint32_t* table = nullptr;
  uint32_t table_mask = 0;
  uint32_t max_len = 0;

  DW_HD int32_t find(const uint8_t* p, uint32_t n) const {
    if (n == 0 || n > max_len) return -1;
    for (uint32_t h = uint32_t(grep_hash(p, n)) & table_mask;; h = (h + 1) & table_mask) {
      const uint32_t e = table[h];
      if (e == 0) return -1;
      const uint32_t a = offs[e - 1], b = offs[e];
      if (b - a != n) continue;
      uint32_t k = 0;
      while (k < n && blob[a + k] == p[k]) ++k;
      if (k == n) return int32_t(e - 1);
    }
  }
};

constexpr uint32_t grep_chunk = 4096;        // bytes of a file scanned per step
constexpr uint32_t grep_readahead = 64 << 10;  // bytes of a file fetched ahead of its scan (gprefetch)
// A warp's (word, count) entries, written out once past half full, after
// a chunk: a chunk holds at most grep_chunk / 2 + 1 words, so half a table
// plus a chunk's new words must fit, or grep_count would find no free entry.
constexpr uint32_t grep_table = 8192;
static_assert(grep_table / 2 >= grep_chunk / 2 + 1, "a chunk's new words must fit in half a word table");
constexpr uint32_t grep_text = 64 * 1024;    // a warp's output buffer
// A warp writes its buffer out after a file once it holds this much, or
// two of the output's pages if more: the output's pages then go to the
// host during the search (write-behind of a write-once file's whole pages)
// instead of all at the end. A write at any offset covers a page whole
// only if it is longer than one: 16 KiB writes covered no 16 KiB page.
constexpr uint32_t grep_write_after = 16 * 1024;
constexpr uint32_t grep_path_stride = 512;   // bytes per path in the job's list (NUL included)
// A file longer than a piece (grep_job::piece_bytes, this by default) is
// counted in pieces by several workers (grep_piece): one warp counts 5-9
// MB a second, so a large file read by its opener alone decided when the
// search ended. 64 KiB searched drivers/net 1.15x as fast as 256 KiB and
// 2x as fast as 1 MiB (bench/probes/grep-vs-cpu), Linux's core tree
// alike. A multiple of grep_chunk, so pieces start on a chunk.
constexpr uint64_t grep_piece_bytes = 64 << 10;
static_assert(grep_piece_bytes % grep_chunk == 0, "pieces start on a chunk");
// Pieces waiting at once (grep_job::pieces); a file whose pieces find no
// room is scanned whole by its opener.
constexpr uint32_t grep_max_pieces = 1 << 16;

// Per warp scratch, in client memory.
struct grep_scratch {
  uint8_t chunk[grep_chunk + 1 + 256];  // the byte before, the chunk, and room to finish a word
  uint32_t keys[grep_table];            // word index + 1, 0 empty
  uint32_t counts[grep_table];
  uint32_t order[grep_table];           // the entries in use, [0, used): emitting visits only these
  uint32_t used;
  uint32_t text_used;
  char text[grep_text];
};

// The file API call a failure came from (grep_counters::last_call).
enum class grep_call : int { none = 0, open, read, close, write };
inline const char* grep_call_name(int c) {
  constexpr const char* names[] = {"none", "gopen", "gread", "gclose", "gwrite"};
  return c >= 0 && c <= 4 ? names[c] : "?";
}

// Where a worker's time goes (grep_counters::phase_ns).
enum grep_phase : int {
  grep_in_open = 0,
  grep_in_read,
  grep_in_scan,
  grep_in_close,
  grep_in_write,
  grep_in_prefetch,
  grep_in_emit,
  grep_phases
};
inline const char* grep_phase_name(int p) {
  constexpr const char* names[] = {"open", "read", "scan", "close", "write", "prefetch", "emit"};
  return p >= 0 && p < grep_phases ? names[p] : "?";
}

struct grep_counters {
  unsigned long long files, bytes, matches, lines, failed;
  int last_err;   // the errno of the last failure
  int last_call;  // and its call (grep_call)
  unsigned long long last_path;  // and its file: index in the file list + 1 (0: the output)
  // Where the workers' time went, summed over workers (nanoseconds), by
  // grep_phase: gopen, gread, counting words, gclose, writing lines out,
  // gprefetch, and making a file's lines.
  unsigned long long phase_ns[grep_phases];
  // The longest a worker took over one file or piece, open to close:
  // microseconds << 24 | the bytes it scanned in KiB (at most 2^24 - 1).
  unsigned long long slowest;
};

// A piece of a large file for any worker to count: its path and its first
// byte. Written once by the file's opener, then `ready` set (release).
struct grep_piece {
  uint32_t path;
  uint32_t ready;
  uint64_t first;
};

struct grep_job {
  gfs_ref in, out;
  gfile out_file;                   // opened for writing on `out`, shared by all warps
  grep_dict_ref dict;
  const char* paths = nullptr;      // npaths x grep_path_stride
  uint32_t npaths = 0;
  unsigned long long* next_path = nullptr;   // client memory: the next path to take
  unsigned long long* out_cursor = nullptr;  // client memory: bytes of output reserved
  grep_scratch* scratch = nullptr;           // one per worker
  grep_counters* counters = nullptr;         // client memory
  // Pieces of large files (client memory, grep_max_pieces, zeroed):
  // [*pieces_taken, *pieces_made) are waiting.
  grep_piece* pieces = nullptr;
  unsigned long long* pieces_made = nullptr;
  unsigned long long* pieces_taken = nullptr;
  uint64_t piece_bytes = grep_piece_bytes;  // a multiple of grep_chunk
};

namespace detail {

template <class Warp>
DW_HD void grep_fail(const Warp& w, unsigned mask, const grep_job& j, int err, grep_call call,
                     unsigned long long path = ~0ull) {
  if (w.lane() == lowest_lane(mask)) {
    client_atomic<unsigned long long>(j.counters->failed).fetch_add(1, memory_order_relaxed);
    client_atomic<int>(j.counters->last_err).store(err, memory_order_relaxed);
    client_atomic<int>(j.counters->last_call).store(int(call), memory_order_relaxed);
    client_atomic<unsigned long long>(j.counters->last_path).store(path + 1, memory_order_relaxed);
  }
}

DW_HD inline uint32_t grep_digits(uint32_t v) {
  uint32_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

// Writes the warp's text buffer to the output file.
template <class Warp>
DW_HD void grep_write_text(const Warp& w, unsigned mask, const grep_job& j, grep_scratch& s) {
  const uint32_t n = s.text_used;
  if (n == 0) return;
  unsigned long long at = 0;
  if (w.lane() == lowest_lane(mask)) at = client_atomic<unsigned long long>(*j.out_cursor).fetch_add(n, memory_order_relaxed);
  at = shfl64(w, mask, at, lowest_lane(mask));
  const int64_t r = j.out.gwrite(w, j.out_file, at, s.text, n);
  if (r != int64_t(n)) grep_fail(w, mask, j, r < 0 ? int(-r) : 5, grep_call::write);
  w.sync(mask);
  if (w.lane() == lowest_lane(mask)) s.text_used = 0;
  w.sync(mask);
}

// Writes a warp's text buffer through the file API (the job's output file).
struct grep_file_sink {
  const grep_job& j;
  template <class Warp>
  DW_HD void operator()(const Warp& w, unsigned mask, grep_scratch& s) const {
    grep_write_text(w, mask, j, s);
  }
};

// Emits the table's entries as lines for `path` and empties the table;
// `sink(w, mask, s)` takes the text buffer when it fills. Only the entries
// in use are visited (s.order): a source file's hundred-odd words in a
// table of 8,192 entries made the whole-table sweep a tenth of a search.
template <class Warp, class Sink>
DW_HD void grep_emit(const Warp& w, unsigned mask, const grep_dict_ref& dict, grep_counters* counters,
                     grep_scratch& s, const char* path, uint32_t path_len, const Sink& sink) {
  const unsigned lanes = popcount32(mask);
  const unsigned rank = popcount32(mask & ((1u << w.lane()) - 1));
  uint32_t used = w.lane() == lowest_lane(mask) ? client_atomic<uint32_t>(s.used).load(memory_order_relaxed) : 0;
  used = w.shfl(mask, used, lowest_lane(mask));
  for (uint32_t base = 0; base < used; base += lanes) {
    const uint32_t i = base + rank < used ? s.order[base + rank] : 0;
    const uint32_t key = base + rank < used ? s.keys[i] : 0;
    uint32_t len = 0, wlen = 0, cnt = 0;
    if (key) {
      cnt = s.counts[i];
      wlen = dict.offs[key] - dict.offs[key - 1];
      len = grep_digits(cnt) + 1 + wlen + 1 + path_len + 1;
    }
    // Offsets of the lanes' lines: lengths gathered from every lane.
    uint32_t before = 0, total = 0;
    for (unsigned m = mask; m; m &= m - 1) {
      const unsigned l = lowest_lane(m);
      const uint32_t v = w.shfl(mask, len, l);
      if (l < w.lane()) before += v;
      total += v;
    }
    if (total == 0) continue;
    if (s.text_used + total > grep_text) sink(w, mask, s);
    if (key) {
      char* o = s.text + s.text_used + before;
      const uint32_t d = grep_digits(cnt);
      for (uint32_t k = d, v = cnt; k-- > 0; v /= 10) o[k] = char('0' + v % 10);
      o += d;
      *o++ = '\t';
      const uint8_t* wd = dict.blob + dict.offs[key - 1];
      for (uint32_t k = 0; k < wlen; ++k) *o++ = char(wd[k]);
      *o++ = '\t';
      for (uint32_t k = 0; k < path_len; ++k) *o++ = path[k];
      *o++ = '\n';
      s.keys[i] = 0;
      s.counts[i] = 0;
      client_atomic<unsigned long long>(counters->lines).fetch_add(1, memory_order_relaxed);
    }
    w.sync(mask);
    if (w.lane() == lowest_lane(mask)) s.text_used += total;
    w.sync(mask);
  }
  if (w.lane() == lowest_lane(mask)) s.used = 0;
  w.sync(mask);
}

// Counts word `id` in the table.
DW_HD inline void grep_count(grep_scratch& s, uint32_t id) {
  const uint32_t key = id + 1;
  for (uint32_t h = (key * 2654435761u) & (grep_table - 1);; h = (h + 1) & (grep_table - 1)) {
    client_atomic<uint32_t> k(s.keys[h]);
    uint32_t cur = k.load(memory_order_relaxed);
    if (cur == 0 && k.compare_exchange_strong(cur, key, memory_order_relaxed)) {
      s.order[client_atomic<uint32_t>(s.used).fetch_add(1, memory_order_relaxed)] = h;
      cur = key;
    }
    if (cur == key) {
      client_atomic<uint32_t>(s.counts[h]).fetch_add(1, memory_order_relaxed);
      return;
    }
  }
}

// Counts the dictionary words that start in chunk[lead, stop) into the
// warp's table (a word may run on to `end`); this lane takes the 128-byte
// stripes rank, rank + lanes, ... Returns the words this lane found.
DW_HD inline unsigned long long grep_scan_chunk(const grep_dict_ref& dict, grep_scratch& s, const uint8_t* chunk,
                                                uint32_t lead, uint32_t stop, uint32_t end, unsigned rank,
                                                unsigned lanes) {
  unsigned long long found = 0;
  // A word belongs to the stripe where it starts.
  for (uint32_t a = lead + rank * 128; a < stop; a += lanes * 128) {
    const uint32_t b = a + 128 < stop ? a + 128 : stop;
    for (uint32_t i = a; i < b; ++i) {
      if (!grep_word_byte(chunk[i]) || (i > 0 && grep_word_byte(chunk[i - 1]))) continue;
      uint32_t e = i + 1;
      while (e < end && grep_word_byte(chunk[e])) ++e;
      const int32_t id = dict.find(chunk + i, e - i);
      if (id >= 0) {
        grep_count(s, uint32_t(id));
        ++found;
      }
      i = e - 1;
    }
  }
  return found;
}

}  // namespace detail

// One worker (a warp, or a CPU thread as one_lane): files until none is left.
template <class Warp>
DW_HD void grep_worker(const Warp& w, const grep_job& j, uint32_t worker) {
  const unsigned mask = w.active();
  const bool leader = w.lane() == lowest_lane(mask);
  const unsigned lanes = popcount32(mask);
  const unsigned rank = popcount32(mask & ((1u << w.lane()) - 1));
  grep_scratch& s = j.scratch[worker];
  const detail::grep_file_sink sink{j};
  const uint32_t tail = j.dict.max_len < 255 ? j.dict.max_len + 1 : 256;
  // The leader's clock: the time since the last lap goes to phase k.
  unsigned long long spent[grep_phases] = {};
  uint64_t mark = leader ? now_ns() : 0;
  auto lap = [&](grep_phase k) {
    if (!leader) return;
    const uint64_t t = now_ns();
    spent[k] += t - mark;
    mark = t;
  };
  for (;;) {
    // A waiting piece of a large file first, else the next file.
    unsigned long long p = 0, first = 0;
    uint32_t kind = 0;  // 0: nothing left, 1: a whole file, 2: a piece
    if (leader) {
      client_atomic<unsigned long long> taken(*j.pieces_taken), made(*j.pieces_made);
      unsigned long long t = taken.load(memory_order_relaxed);
      bool got = false;
      while (!got && t < made.load(memory_order_relaxed))
        got = taken.compare_exchange_weak(t, t + 1, memory_order_relaxed);
      if (got) {
        grep_piece& pc = j.pieces[t];
        while (client_atomic<uint32_t>(pc.ready).load(memory_order_acquire) == 0) {
        }
        p = pc.path;
        first = pc.first;
        kind = 2;
      } else if ((p = client_atomic<unsigned long long>(*j.next_path).fetch_add(1, memory_order_relaxed)) < j.npaths) {
        kind = 1;
      }
    }
    kind = w.shfl(mask, kind, lowest_lane(mask));
    if (kind == 0) break;
    p = shfl64(w, mask, p, lowest_lane(mask));
    first = shfl64(w, mask, first, lowest_lane(mask));
    const uint64_t began = leader ? now_ns() : 0;
    const char* path = j.paths + p * grep_path_stride;
    uint32_t path_len = 0;
    while (path_len < grep_path_stride && path[path_len]) ++path_len;
    lap(grep_in_scan);
    const gfile f = j.in.gopen(w, path, g_rdonly);
    lap(grep_in_open);
    if (!f.ok()) {
      detail::grep_fail(w, mask, j, f.err, grep_call::open, p);
      continue;
    }
    uint64_t size = 0;
    {
      gstat st;
      j.in.gfstat(w, f, &st);
      size = shfl64(w, mask, st.size, lowest_lane(mask));
    }
    // The bytes this worker counts: a piece's, or, for the file's opener,
    // the first piece once the others wait for any worker (where there is
    // room for them), else the whole file.
    uint64_t last = size;
    if (kind == 2) {
      last = first + j.piece_bytes < size ? first + j.piece_bytes : size;
      if (last < first) last = first;  // the file shrank since its opener looked
    } else if (size > j.piece_bytes) {
      const unsigned long long more = (size - 1) / j.piece_bytes;  // pieces after the first
      unsigned long long at = 0;
      bool room = false;
      if (leader) {
        client_atomic<unsigned long long> made(*j.pieces_made);
        at = made.load(memory_order_relaxed);
        while (at + more <= grep_max_pieces && !made.compare_exchange_weak(at, at + more, memory_order_relaxed)) {
        }
        room = at + more <= grep_max_pieces;
        if (room)
          for (unsigned long long k = 0; k < more; ++k) {
            grep_piece& pc = j.pieces[at + k];
            pc.path = uint32_t(p);
            pc.first = (k + 1) * j.piece_bytes;
            client_atomic<uint32_t>(pc.ready).store(1, memory_order_release);
          }
      }
      if (w.shfl(mask, uint32_t(room), lowest_lane(mask))) last = j.piece_bytes;
    }
    // Readahead: the first grep_readahead bytes now, then each chunk's
    // that much further on, so that a chunk's read rarely waits for a
    // whole round trip to the host (a file's chunks were otherwise fetched
    // one after the other, each after the last was scanned).
    lap(grep_in_scan);
    if (last > first) j.in.gprefetch(w, f, first, grep_readahead < last - first ? grep_readahead : last - first);
    lap(grep_in_prefetch);
    for (uint64_t off = first; off < last; off += grep_chunk) {
      if (off + grep_readahead < last) {
        lap(grep_in_scan);
        j.in.gprefetch(w, f, off + grep_readahead, grep_chunk);
        lap(grep_in_prefetch);
      }
      // The byte before the chunk (is the first byte a word's start?), the
      // chunk, and enough after it to finish a word that starts inside
      // (past the piece's end too: a word belongs where it starts).
      const uint64_t from = off ? off - 1 : 0;
      lap(grep_in_scan);
      const int64_t n = j.in.gread(w, f, from, s.chunk, (off - from) + grep_chunk + tail);
      lap(grep_in_read);
      if (n < 0) {
        detail::grep_fail(w, mask, j, int(-n), grep_call::read, p);
        break;
      }
      w.sync(mask);  // every lane reads bytes other lanes copied
      const uint32_t lead = uint32_t(off - from);
      const uint32_t end = uint32_t(n), stop = uint32_t(n) < lead + grep_chunk ? uint32_t(n) : lead + grep_chunk;
      const unsigned long long found =
          detail::grep_scan_chunk(j.dict, s, s.chunk, lead, stop, end, rank, lanes);
      if (found) client_atomic<unsigned long long>(j.counters->matches).fetch_add(found, memory_order_relaxed);
      w.sync(mask);
      uint32_t used = leader ? client_atomic<uint32_t>(s.used).load(memory_order_relaxed) : 0;
      used = w.shfl(mask, used, lowest_lane(mask));
      if (used > grep_table / 2) {
        lap(grep_in_scan);
        detail::grep_emit(w, mask, j.dict, j.counters, s, path, path_len, sink);
        lap(grep_in_emit);
      }
    }
    lap(grep_in_scan);
    detail::grep_emit(w, mask, j.dict, j.counters, s, path, path_len, sink);
    lap(grep_in_emit);
    const uint32_t page = j.out.bytes.cache.page_size();
    if (s.text_used >= (2 * page > grep_write_after ? 2 * page : grep_write_after)) detail::grep_write_text(w, mask, j, s);
    lap(grep_in_write);
    const int c = j.in.gclose(w, f);
    lap(grep_in_close);
    if (c) detail::grep_fail(w, mask, j, -c, grep_call::close, p);
    if (leader) {
      if (kind == 1) {  // a file is counted once, by its opener
        client_atomic<unsigned long long>(j.counters->files).fetch_add(1, memory_order_relaxed);
        client_atomic<unsigned long long>(j.counters->bytes).fetch_add(size, memory_order_relaxed);
      }
      const unsigned long long us = (now_ns() - began) / 1000, kib = (last > first ? last - first : 0) >> 10;
      client_atomic<unsigned long long>(j.counters->slowest)
          .fetch_max((us < (1ull << 40) ? us : (1ull << 40) - 1) << 24 | (kib < (1u << 24) ? kib : (1u << 24) - 1),
                     memory_order_relaxed);
    }
  }
  lap(grep_in_scan);
  detail::grep_write_text(w, mask, j, s);
  lap(grep_in_write);
  if (leader)
    for (int k = 0; k < grep_phases; ++k)
      client_atomic<unsigned long long>(j.counters->phase_ns[k]).fetch_add(spent[k], memory_order_relaxed);
}

}  // namespace deepwell
