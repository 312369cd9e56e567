// Host parts of the recoverable BFS (apps/recoverable_bfs/recoverable_bfs.hpp):
// the state file's layout and checksums, graph identities, reading a state
// image, and creating the state file.
#include "recoverable_bfs/recoverable_bfs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace deepwell::graph {

uint64_t rbfs_checksum(const void* p, size_t bytes) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= b[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

rbfs_layout rbfs_layout_for(uint64_t nodes, uint64_t log_words) {
  rbfs_layout l{};
  l.depth_at = rbfs_depth_word;
  l.log_at = align_up(l.depth_at + nodes, rbfs_align_words);
  l.log_words = log_words ? log_words : align_up(2 * nodes + 65536, rbfs_align_words);
  l.total_words = align_up(l.log_at + l.log_words, rbfs_align_words);
  return l;
}

namespace {

struct identity_hasher {
  uint64_t h = 0x6A09E667F3BCC908ull;
  void add(uint64_t v) { h = rbfs_mix(h ^ v); }
  void add(const char* s, size_t max) {
    const size_t len = strnlen(s, max);
    add(len);
    for (size_t i = 0; i < len; ++i) add(uint64_t(uint8_t(s[i])));
  }
};

template <class Offset, class Neighbour>
uint64_t identity_hash(uint64_t nodes, uint64_t edges, uint32_t id_bytes, uint32_t weights, uint32_t flags,
                       uint64_t seed, const char* origin, Offset&& offset, Neighbour&& neighbour) {
  identity_hasher x;
  x.add(nodes);
  x.add(edges);
  x.add(id_bytes);
  x.add(weights);
  x.add(flags);
  x.add(seed);
  x.add(origin, 63);  // what the file's header keeps of it
  for (uint64_t i = 0; i < 64; ++i) {
    const uint64_t v = nodes ? (nodes * i) / 64 : 0;
    x.add(offset(v + 1));
  }
  for (uint64_t i = 0; i < 64 && edges; ++i) x.add(neighbour((edges * i) / 64));
  return x.h;
}

}  // namespace

graph_identity identity_of(const csr_file& f) {
  const csr_header& h = f.header();
  const uint64_t* off = f.offsets();
  return {h.nodes, h.edges,
          identity_hash(h.nodes, h.edges, h.id_bytes, uint32_t(h.weights), h.flags, h.seed, h.origin,
                        [&](uint64_t v) { return off[v]; }, [&](uint64_t e) { return f.neighbour(e); })};
}

graph_identity identity_of(const csr_graph& g) {
  return {g.nodes, g.edges(),
          identity_hash(g.nodes, g.edges(), g.id_bytes, uint32_t(g.weights), g.flags, g.seed, g.origin.c_str(),
                        [&](uint64_t v) { return g.offsets[v]; }, [&](uint64_t e) { return g.neighbour(e); })};
}

bfs_state_summary inspect_bfs_state(const uint8_t* image, uint64_t bytes) {
  bfs_state_summary s;
  rbfs_header h[2];
  bool zero[2], ok[2], ours[2];  // ours: the magic is there
  std::string why[2];
  for (int c = 0; c < 2; ++c) {
    const uint64_t at = rbfs_copy_word[c] * 4;
    std::memset(&h[c], 0, sizeof h[c]);
    if (at + sizeof(rbfs_header) <= bytes) std::memcpy(&h[c], image + at, sizeof h[c]);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&h[c]);
    zero[c] = true;
    for (size_t i = 0; i < sizeof h[c]; ++i) zero[c] = zero[c] && p[i] == 0;
    ours[c] = std::memcmp(h[c].magic, rbfs_magic, sizeof rbfs_magic) == 0;
    ok[c] = false;
    if (zero[c])
      why[c] = "empty";
    else if (!ours[c])
      why[c] = "wrong magic";
    else if (h[c].version != rbfs_version)
      why[c] = "version " + std::to_string(h[c].version) + " (this code reads " + std::to_string(rbfs_version) + ")";
    else if (h[c].record_bytes != rbfs_record_bytes)
      why[c] = "record size " + std::to_string(h[c].record_bytes);
    else if (h[c].checksum != rbfs_header_checksum(h[c]))
      why[c] = "checksum mismatch";
    else if (h[c].generation == 0 || h[c].generation % 2 != uint64_t(c))
      why[c] = "generation " + std::to_string(h[c].generation) + " in the wrong copy";
    else
      ok[c] = true;
  }
  if (ok[0] || ok[1]) {
    const int c = ok[0] && ok[1] ? (h[1].generation > h[0].generation ? 1 : 0) : (ok[1] ? 1 : 0);
    s.valid = true;
    s.copy = c;
    s.header = h[c];
    const int o = 1 - c;
    s.older_valid = ok[o] && h[o].run_id == h[c].run_id && h[o].generation + 1 == h[c].generation;
    if (s.older_valid) s.older = h[o];
    return s;
  }
  s.problem = "copy 0: " + why[0] + "; copy 1: " + why[1];
  // Nothing committed: copy 0 empty and copy 1 empty or not valid. The
  // first commit (generation 1) goes to copy 1 while copy 0 is empty (a new
  // state clears both first, copy 0 first), so such a state never got past
  // its creation; copy 1 may hold what a cut left of that first commit (on
  // a disk whose sectors are smaller than a copy, not even its magic).
  s.empty = zero[0];
  return s;
}

std::shared_ptr<target> open_bfs_state_file(const std::string& path, uint64_t nodes, bool direct, uint64_t log_words) {
  const uint64_t need = bfs_state_bytes(nodes, log_words);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw error(errno_message("stat " + path, e));
  }
  if (S_ISREG(st.st_mode) && uint64_t(st.st_size) < need && ::ftruncate(fd, off_t(need)) != 0) {
    const int e = errno;
    ::close(fd);
    throw error(errno_message("extend " + path + " to " + std::to_string(need) + " bytes", e));
  }
  if (S_ISREG(st.st_mode) && uint64_t(st.st_size) < need && ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw error(errno_message("fsync " + path, e));
  }
  ::close(fd);
  file_options fo;
  fo.writable = true;
  fo.direct = direct;
  return open_file_target(path, fo);
}

}  // namespace deepwell::graph
