// Reading, checking and writing .dwg graph files.
#include "deepwell/graph/csr_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/graph/parallel.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "common/disk_header.hpp"
#include "common/file_io.hpp"
#include "common/mapping_guard.hpp"

namespace deepwell::graph {

// ---------------------------------------------------------------------------
// progress

struct progress::state {
  bool enabled = true;
  bool tty = false;
  std::mutex m;
  std::string name;
  uint64_t total = 0;
  std::atomic<uint64_t> done{0};
  int last_percent = -1;
  std::chrono::steady_clock::time_point start;
};

progress::progress(bool enabled) : s_(std::make_unique<state>()) {
  s_->enabled = enabled;
  s_->tty = isatty(STDERR_FILENO);
}
progress::~progress() { done(); }

void progress::phase(const std::string& name, uint64_t total) {
  done();
  std::lock_guard<std::mutex> l(s_->m);
  s_->name = name;
  s_->total = total;
  s_->done = 0;
  s_->last_percent = -1;
  s_->start = std::chrono::steady_clock::now();
}

void progress::advance(uint64_t n) {
  const uint64_t d = s_->done.fetch_add(n) + n;
  if (!s_->enabled || !s_->tty || s_->total == 0) return;
  const int pct = int(std::min<uint64_t>(100, d * 100 / s_->total));
  std::unique_lock<std::mutex> l(s_->m, std::try_to_lock);
  if (!l.owns_lock() || pct == s_->last_percent) return;
  s_->last_percent = pct;
  const int width = 30, fill = pct * width / 100;
  std::fprintf(stderr, "\r%-22s [%.*s%*s] %3d%%", s_->name.c_str(), fill, "##############################",
               width - fill, "", pct);
  std::fflush(stderr);
}

void progress::done() {
  std::lock_guard<std::mutex> l(s_->m);
  if (s_->name.empty()) return;
  if (s_->enabled) {
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s_->start).count();
    std::fprintf(stderr, "%s%-22s done in %.2f s%s\n", s_->tty ? "\r" : "", s_->name.c_str(), sec,
                 s_->tty ? "                    " : "");
  }
  s_->name.clear();
}

// ---------------------------------------------------------------------------
// header checks

namespace {
// The header's CRC-32C: its struct with the header_crc field zero.
uint32_t header_crc(csr_header h) {
  h.header_crc = 0;
  return crc32c(0, &h, sizeof h);
}
}  // namespace

void check_header(const csr_header& h, uint64_t file_bytes, const std::string& what) {
  if (!::deepwell::detail::magic_matches(h, csr_magic))
    throw error(what + ": not a deepwell graph file (wrong magic; convert edge lists with `deepwell graph convert`)");
  if (h.version != csr_version && h.version != csr_version_unchecked)
    throw error(what + ": graph format version " + std::to_string(h.version) + ", this build reads versions " +
                std::to_string(csr_version_unchecked) + " and " + std::to_string(csr_version) +
                " (a newer deepwell's file, or a corrupt header)");
  if (h.header_bytes != csr_header_bytes) throw error(what + ": bad header size " + std::to_string(h.header_bytes));
  if (h.id_bytes != 4 && h.id_bytes != 8)
    throw error(what + ": node id width " + std::to_string(h.id_bytes) + " bytes (must be 4 or 8)");
  if (h.id_bytes == 4 && h.nodes > (uint64_t(1) << 32))
    throw error(what + ": " + std::to_string(h.nodes) + " nodes do not fit 4-byte ids");
  if (h.weights != weight_type::none && h.weights != weight_type::u32 && h.weights != weight_type::f32)
    throw error(what + ": unknown weight type " + std::to_string(uint32_t(h.weights)));
  if (h.nodes > (uint64_t(1) << 40) || h.edges > (uint64_t(1) << 44))
    throw error(what + ": implausible size (" + std::to_string(h.nodes) + " nodes, " + std::to_string(h.edges) +
                " edges): corrupt header");
  const csr_layout l = layout_for(h.nodes, h.edges, h.id_bytes, h.weights, h.version);
  if (h.offsets_at != l.offsets_at || h.neighbours_at != l.neighbours_at || h.weights_at != l.weights_at ||
      h.sums_at != l.sums_at || h.sums_bytes != l.sums_bytes || h.file_bytes != l.file_bytes)
    throw error(what + ": section offsets in the header do not match the layout for " + std::to_string(h.nodes) +
                " nodes and " + std::to_string(h.edges) + " edges: corrupt header");
  // The checksum after the fields' own checks, whose messages say more; a
  // change that keeps every field plausible (a node count, a flag, the
  // origin) is caught here.
  if (h.version != csr_version_unchecked && header_crc(h) != h.header_crc)
    throw data_error(what + ": the header does not match its checksum: a corrupt graph file");
  if (file_bytes < h.file_bytes)
    throw error(what + ": truncated: " + std::to_string(file_bytes) + " bytes, the header says " +
                std::to_string(h.file_bytes));
}

// ---------------------------------------------------------------------------
// write

namespace {


// Whole writes at an offset, each piece told to the progress output.
void pwrite_all(int fd, const void* p, uint64_t bytes, uint64_t at, const std::string& path, progress* pr) {
  ::deepwell::detail::pwrite_all(fd, p, bytes, at, path, [pr](uint64_t n) {
    if (pr) pr->advance(n);
  });
}

// The sums section of a graph in memory: the sums of its offsets,
// neighbours and weights, in that order (the file's padding after each is
// zeros, which is what a partial last block's sum covers).
std::vector<uint32_t> graph_sums(const csr_graph& g) {
  const uint64_t m = g.edges();
  const uint64_t off_bytes = (g.nodes + 1) * 8, nbr_bytes = m * g.id_bytes;
  const uint64_t wts_bytes = g.weights == weight_type::none ? 0 : m * 4;
  std::vector<uint32_t> sums(section_sum_count(off_bytes) + section_sum_count(nbr_bytes) +
                             section_sum_count(wts_bytes));
  uint32_t* out = sums.data();
  section_sums(g.offsets.data(), off_bytes, out);
  out += section_sum_count(off_bytes);
  section_sums(g.id_bytes == 4 ? static_cast<const void*>(g.nbr32.data()) : g.nbr64.data(), nbr_bytes, out);
  out += section_sum_count(nbr_bytes);
  if (wts_bytes) section_sums(g.wts.data(), wts_bytes, out);
  return sums;
}

}  // namespace

void write_csr(const std::string& path, const csr_graph& g, progress* p) {
  if (g.offsets.size() != g.nodes + 1) throw error("write_csr: offsets has " + std::to_string(g.offsets.size()) +
                                                   " entries for " + std::to_string(g.nodes) + " nodes");
  const uint64_t m = g.edges();
  if ((g.id_bytes == 4 ? g.nbr32.size() : g.nbr64.size()) != m) throw error("write_csr: neighbour array size mismatch");
  if (g.weights != weight_type::none && g.wts.size() != m) throw error("write_csr: weight array size mismatch");
  const csr_layout l = layout_for(g.nodes, m, g.id_bytes, g.weights);
  csr_header h;
  ::deepwell::detail::stamp_header(h, csr_magic, csr_version);
  h.header_bytes = csr_header_bytes;
  h.nodes = g.nodes;
  h.edges = m;
  h.id_bytes = g.id_bytes;
  h.weights = g.weights;
  h.flags = g.flags;
  h.offsets_at = l.offsets_at;
  h.neighbours_at = l.neighbours_at;
  h.weights_at = l.weights_at;
  h.file_bytes = l.file_bytes;
  h.seed = g.seed;
  std::snprintf(h.origin, sizeof(h.origin), "%s", g.origin.c_str());
  const std::vector<uint32_t> sums = graph_sums(g);
  h.sums_at = l.sums_at;
  h.sums_bytes = l.sums_bytes;
  h.sums_crc = crc32c(0, sums.data(), sums.size() * 4);
  h.header_crc = header_crc(h);

  // Write to a temporary name and rename: an interrupted run never leaves a
  // file that looks complete.
  const std::string tmp = path + ".partial";
  ::deepwell::detail::check_output_path(path);
  ::deepwell::detail::check_output_path(tmp);
  ::deepwell::detail::unique_fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (f.get() < 0) throw error(errno_message("create " + tmp, errno));
  // Whatever stops the write (a full disk) leaves no .partial behind.
  struct partial_guard {
    const std::string& name;
    bool keep = false;
    ~partial_guard() {
      if (!keep) ::unlink(name.c_str());
    }
  } partial{tmp};
  if (::ftruncate(f.get(), off_t(l.file_bytes)) != 0) throw error(errno_message("size " + tmp, errno));
  if (p) p->phase("write " + std::to_string(l.file_bytes >> 20) + " MiB", l.file_bytes);
  std::vector<uint8_t> head(csr_header_bytes, 0);
  std::memcpy(head.data(), &h, sizeof(h));
  pwrite_all(f.get(), head.data(), head.size(), 0, tmp, p);
  pwrite_all(f.get(), g.offsets.data(), (g.nodes + 1) * 8, l.offsets_at, tmp, p);
  if (g.id_bytes == 4)
    pwrite_all(f.get(), g.nbr32.data(), m * 4, l.neighbours_at, tmp, p);
  else
    pwrite_all(f.get(), g.nbr64.data(), m * 8, l.neighbours_at, tmp, p);
  if (g.weights != weight_type::none) pwrite_all(f.get(), g.wts.data(), m * 4, l.weights_at, tmp, p);
  pwrite_all(f.get(), sums.data(), l.sums_bytes, l.sums_at, tmp, p);
  if (::fdatasync(f.get()) != 0) throw error(errno_message("sync " + tmp, errno));
  if (::close(f.release()) != 0) {
    throw error(errno_message("close " + tmp, errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw error(errno_message("rename " + tmp + " to " + path, errno));
  partial.keep = true;
  if (p) p->done();
}

// ---------------------------------------------------------------------------
// csr_file

csr_file::csr_file(const std::string& path) : path_(path) {
  ::deepwell::detail::unique_fd f(::open(path.c_str(), O_RDONLY));
  if (f.get() < 0) throw error(errno_message("open " + path, errno));
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) throw error(errno_message("stat " + path, errno));
  if (!S_ISREG(st.st_mode)) throw error(path + ": not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size < sizeof(csr_header))
    throw error(path + ": truncated: " + std::to_string(size) + " bytes, shorter than a graph header");
  const ssize_t n = ::pread(f.get(), &h_, sizeof(h_), 0);
  if (n != ssize_t(sizeof(h_))) throw error(errno_message("read " + path, n < 0 ? errno : EIO));
  check_header(h_, size, path);
  void* m = ::mmap(nullptr, h_.file_bytes, PROT_READ, MAP_SHARED, f.get(), 0);
  if (m == MAP_FAILED) throw error(errno_message("mmap " + path, errno));
  base_ = static_cast<const uint8_t*>(m);
  mapped_ = h_.file_bytes;
  guard_ = ::deepwell::detail::guard_mapping(m, mapped_);
  if (checksummed()) {
    sums_.resize(h_.sums_bytes / 4);
    std::memcpy(sums_.data(), base_ + h_.sums_at, h_.sums_bytes);
    if (crc32c(0, sums_.data(), h_.sums_bytes) != h_.sums_crc) {
      ::deepwell::detail::unguard_mapping(guard_);
      ::munmap(m, mapped_);
      throw data_error(path + ": the sums section (bytes [" + std::to_string(h_.sums_at) + ", " +
                  std::to_string(h_.sums_at + h_.sums_bytes) + ")) does not match its checksum: a corrupt graph file");
    }
  }
  const uint64_t* off = offsets();
  if (off[0] != 0 || off[h_.nodes] != h_.edges) {
    const std::string msg = path + ": offsets run from " + std::to_string(off[0]) + " to " +
                            std::to_string(off[h_.nodes]) + ", the header says 0 to " + std::to_string(h_.edges);
    ::deepwell::detail::unguard_mapping(guard_);
    ::munmap(m, mapped_);
    throw error(msg);
  }
}

void csr_file::check_whole() const {
  if (::deepwell::detail::mapping_cut(guard_)) throw error(path_ + ": the file was truncated while it was being read");
}

csr_file::~csr_file() {
  ::deepwell::detail::unguard_mapping(guard_);
  if (base_) ::munmap(const_cast<uint8_t*>(base_), mapped_);
}

const uint32_t* csr_file::neighbours32() const {
  if (h_.id_bytes != 4) throw error(path_ + ": has 8-byte node ids (this operation needs 4-byte ids)");
  return static_cast<const uint32_t*>(neighbours());
}

const uint32_t* csr_file::weights() const {
  if (h_.weights == weight_type::none) return nullptr;
  return reinterpret_cast<const uint32_t*>(base_ + h_.weights_at);
}

const char* section_name(csr_section s) {
  switch (s) {
    case csr_section::offsets: return "offsets";
    case csr_section::neighbours: return "neighbours";
    case csr_section::weights: return "weights";
  }
  return "?";
}

uint64_t csr_file::section_at(csr_section s) const {
  return s == csr_section::offsets ? h_.offsets_at : s == csr_section::neighbours ? h_.neighbours_at : h_.weights_at;
}

uint64_t csr_file::section_bytes(csr_section s) const {
  return s == csr_section::offsets ? offsets_bytes() : s == csr_section::neighbours ? neighbours_bytes() : weights_bytes();
}

uint64_t csr_file::first_sum(csr_section s) const {
  uint64_t first = 0;
  for (csr_section before : {csr_section::offsets, csr_section::neighbours}) {
    if (before == s) break;
    first += section_sum_count(section_bytes(before));
  }
  return first;
}

std::vector<uint32_t> csr_file::section_sums(csr_section s) const {
  if (!checksummed()) return {};
  return sums_slice(sums_, first_sum(s), section_sum_count(section_bytes(s)));
}

bool csr_file::verify(csr_section s, unsigned threads) const {
  if (!checksummed()) return false;
  if (section_bytes(s)) try {
      verify_section(path_, std::string(section_name(s)) + " section", section_at(s), base_ + section_at(s),
                     section_bytes(s), sums_.data() + first_sum(s), threads);
    } catch (const error&) {
      check_whole();  // zeros where the file was: say so, not "corrupt"
      throw;
    }
  return true;
}

bool csr_file::verify(unsigned threads, progress* p) const {
  if (!checksummed()) return false;
  const csr_section all[] = {csr_section::offsets, csr_section::neighbours, csr_section::weights};
  uint64_t total = 0;
  for (csr_section s : all) total += section_bytes(s);
  if (p) p->phase("verify checksums", total);
  const std::function<void(uint64_t)> advance = [p](uint64_t n) {
    if (p) p->advance(n);
  };
  try {
    for (csr_section s : all)
      if (section_bytes(s))
        verify_section(path_, std::string(section_name(s)) + " section", section_at(s), base_ + section_at(s),
                       section_bytes(s), sums_.data() + first_sum(s), threads, advance);
  } catch (const error&) {
    check_whole();
    throw;
  }
  if (p) p->done();
  return true;
}

namespace {
[[noreturn]] void bad_offsets(const std::string& path, uint64_t v, const uint64_t* off, uint64_t edges) {
  throw error(path + ": offsets of node " + std::to_string(v) + " run from " + std::to_string(off[v]) + " to " +
              std::to_string(off[v + 1]) + " (not monotone or past " + std::to_string(edges) +
              " edges): a corrupt graph file");
}
}  // namespace

void csr_file::check_offsets(unsigned threads) const {
  const uint64_t* off = offsets();
  detail::parallel_for(h_.nodes, threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t v = b; v < e; ++v)
      if (off[v + 1] < off[v] || off[v + 1] > h_.edges) bad_offsets(path_, v, off, h_.edges);
  });
}

void csr_file::check(unsigned threads, progress* p) const {
  const uint64_t* off = offsets();
  const uint64_t n = h_.nodes;
  if (p) p->phase("check", n);
  detail::parallel_for(n, threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t v = b; v < e; ++v) {
      if (off[v + 1] < off[v] || off[v + 1] > h_.edges) bad_offsets(path_, v, off, h_.edges);
      for (uint64_t i = off[v]; i < off[v + 1]; ++i) {
        const uint64_t u = neighbour(i);
        if (u >= n)
          throw error(path_ + ": edge " + std::to_string(i) + " of node " + std::to_string(v) + " points to node " +
                      std::to_string(u) + ", out of range (" + std::to_string(n) + " nodes)");
      }
      if (p && (v & 0xFFFF) == 0) p->advance(std::min<uint64_t>(e - v, 0x10000));
    }
  });
  if (p) p->done();
}

uint64_t max_degree_node(const uint64_t* off, uint64_t nodes) {
  uint64_t best = 0;
  for (uint64_t v = 1; v < nodes; ++v)
    if (off[v + 1] - off[v] > off[best + 1] - off[best]) best = v;
  return best;
}

void csr_file::release_pages() const {
  ::madvise(const_cast<uint8_t*>(base_), mapped_, MADV_DONTNEED);
}

csr_stats csr_file::stats(unsigned threads) const {
  // What it reads checked first: damaged offsets would send the walk
  // outside the file, damaged ids would be counted as they are.
  verify(csr_section::offsets, threads);
  verify(csr_section::neighbours, threads);
  check_offsets(threads);
  const unsigned t = detail::thread_count(threads);
  std::vector<csr_stats> part(t);
  const uint64_t* off = offsets();
  detail::parallel_for(h_.nodes, t, [&](unsigned k, uint64_t b, uint64_t e) {
    csr_stats s;
    for (uint64_t v = b; v < e; ++v) {
      const uint64_t d = off[v + 1] - off[v];
      if (d > s.max_degree) s.max_degree = d, s.max_degree_node = v;
      if (d == 0) ++s.zero_degree;
      for (uint64_t i = off[v]; i < off[v + 1]; ++i) s.self_loops += neighbour(i) == v;
    }
    part[k] = s;
  });
  csr_stats r;
  for (const auto& s : part) {
    if (s.max_degree > r.max_degree) r.max_degree = s.max_degree, r.max_degree_node = s.max_degree_node;
    r.zero_degree += s.zero_degree;
    r.self_loops += s.self_loops;
  }
  r.mean_degree = h_.nodes ? double(h_.edges) / double(h_.nodes) : 0;
  check_whole();
  return r;
}

csr_graph csr_file::load() const {
  verify();
  check_offsets();
  csr_graph g;
  g.nodes = h_.nodes;
  g.id_bytes = h_.id_bytes;
  g.flags = h_.flags;
  g.weights = h_.weights;
  g.seed = h_.seed;
  g.origin = std::string(h_.origin, strnlen(h_.origin, sizeof(h_.origin)));
  g.offsets.assign(offsets(), offsets() + h_.nodes + 1);
  if (h_.id_bytes == 4)
    g.nbr32.assign(neighbours32(), neighbours32() + h_.edges);
  else
    g.nbr64.assign(static_cast<const uint64_t*>(neighbours()), static_cast<const uint64_t*>(neighbours()) + h_.edges);
  if (const uint32_t* w = weights()) g.wts.assign(w, w + h_.edges);
  check_whole();
  return g;
}

}  // namespace deepwell::graph
