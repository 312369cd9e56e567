#include "vectors/build_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_io.hpp"
#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/detail/hash.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell::vectors {

namespace {

constexpr char state_magic[8] = {'D', 'W', 'V', 'B', 'U', 'I', 'L', 'D'};

struct state_header {
  char magic[8];
  uint64_t fingerprint;
  uint64_t count;
  uint32_t degree, phases;
  uint64_t codebook_floats, codes_bytes;
  uint64_t body_bytes;
  uint32_t body_crc, header_crc;
};

// The body: codebook, codes, then (from phase 2) each node's degree and its
// `degree` slots.
std::vector<uint8_t> body_of(uint32_t phases, const std::vector<float>& codebook, const std::vector<uint8_t>& codes,
                             const std::vector<std::vector<uint32_t>>& adj, uint32_t degree) {
  std::vector<uint8_t> b(codebook.size() * 4 + codes.size() + (phases >= 2 ? adj.size() * 4ull * (1 + degree) : 0));
  uint8_t* at = b.data();
  std::memcpy(at, codebook.data(), codebook.size() * 4);
  at += codebook.size() * 4;
  std::memcpy(at, codes.data(), codes.size());
  at += codes.size();
  if (phases >= 2)
    for (const auto& a : adj) {  // unused slots stay zero
      const uint32_t used = uint32_t(a.size());
      std::memcpy(at, &used, 4);
      std::memcpy(at + 4, a.data(), 4ull * used);
      at += 4ull * (1 + degree);
    }
  return b;
}

}  // namespace

uint64_t build_fingerprint(const vector_set& data, metric m, const build_options& o, uint32_t subspaces,
                           uint64_t shard_vectors) {
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &o.alpha, 4);
  uint64_t f = detail::fmix64(crc32c(0, data.data, data.count * data.row_bytes()));
  for (uint64_t v : {data.count, uint64_t(data.dim), uint64_t(data.type), uint64_t(m), uint64_t(o.degree),
                     uint64_t(o.list), uint64_t(alpha_bits), uint64_t(subspaces)})
    f = detail::fmix64(f ^ (v + 0x9E3779B97F4A7C15ull));
  if (shard_vectors)
    for (uint64_t v : {shard_vectors, uint64_t(o.passes)}) f = detail::fmix64(f ^ (v + 0x9E3779B97F4A7C15ull));
  return f;
}

build_state load_build_state(const std::string& file, uint64_t fingerprint, uint64_t count, uint32_t degree) {
  build_state s;
  detail::unique_fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return s;
  state_header h{};
  if (::pread(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h)) return s;
  if (std::memcmp(h.magic, state_magic, 8) != 0 || crc32c(0, &h, offsetof(state_header, header_crc)) != h.header_crc ||
      h.fingerprint != fingerprint || h.count != count || h.degree != degree || h.phases == 0)
    return s;
  std::vector<uint8_t> body(h.body_bytes);
  if (::pread(fd.get(), body.data(), body.size(), sizeof h) != ssize_t(body.size())) return s;
  if (crc32c(0, body.data(), body.size()) != h.body_crc) return s;
  const uint64_t graph_bytes = h.phases >= 2 ? count * 4ull * (1 + degree) : 0;
  if (h.codebook_floats * 4 + h.codes_bytes + graph_bytes != h.body_bytes) return s;
  s.codebook.resize(h.codebook_floats);
  std::memcpy(s.codebook.data(), body.data(), h.codebook_floats * 4);
  s.codes.assign(body.begin() + int64_t(h.codebook_floats * 4), body.begin() + int64_t(h.codebook_floats * 4 + h.codes_bytes));
  if (h.phases >= 2) {
    s.adj.resize(count);
    const uint8_t* at = body.data() + h.codebook_floats * 4 + h.codes_bytes;
    std::vector<uint32_t> row(1 + degree);
    for (uint64_t i = 0; i < count; ++i, at += row.size() * 4) {
      std::memcpy(row.data(), at, row.size() * 4);
      if (row[0] > degree) return build_state{};
      for (uint32_t j = 1; j <= row[0]; ++j)
        if (row[j] >= count) return build_state{};
      s.adj[i].assign(row.begin() + 1, row.begin() + 1 + row[0]);
    }
  }
  s.phases = h.phases;
  return s;
}

void save_build_state(const std::string& file, uint64_t fingerprint, uint64_t count, uint32_t phases,
                      const std::vector<float>& codebook, const std::vector<uint8_t>& codes,
                      const std::vector<std::vector<uint32_t>>& adj, uint32_t degree) {
  const std::vector<uint8_t> body = body_of(phases, codebook, codes, adj, degree);
  state_header h{};
  std::memcpy(h.magic, state_magic, 8);
  h.fingerprint = fingerprint;
  h.count = count;
  h.degree = degree;
  h.phases = phases;
  h.codebook_floats = codebook.size();
  h.codes_bytes = codes.size();
  h.body_bytes = body.size();
  h.body_crc = crc32c(0, body.data(), body.size());
  h.header_crc = crc32c(0, &h, offsetof(state_header, header_crc));
  detail::replacing_file out(file, ".tmp");
  out.write(&h, sizeof h, 0);
  out.write(body.data(), body.size(), sizeof h);
  out.commit();
}

}  // namespace deepwell::vectors
