#include "deepwell/vectors/index_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "common/file_io.hpp"
#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/file_sums.hpp"

namespace deepwell::vectors {

namespace {
// names[e], or "unknown" for a value past them (a damaged header's).
template <class E, size_t N>
const char* name_of(E e, const char* const (&names)[N]) {
  return uint32_t(e) < N ? names[uint32_t(e)] : "unknown";
}
}  // namespace

const char* type_name(vector_type t) { return name_of(t, {"float32", "float16", "uint8"}); }
const char* metric_name(metric m) { return name_of(m, {"l2", "ip"}); }
const char* section_name(index_section s) { return name_of(s, {"records", "codebook", "codes", "labels"}); }

namespace {
constexpr index_section all_sections[] = {index_section::records, index_section::codebook, index_section::codes,
                                          index_section::labels};
}  // namespace

uint32_t header_crc(const index_header& h) { return crc32c(0, &h, offsetof(index_header, header_crc)); }

void check_header(const index_header& h, uint64_t file_bytes, const std::string& what) {
  auto bad = [&](const std::string& m) { throw data_error(what + ": " + m); };
  if (file_bytes < index_header_bytes) bad("too short for a vector index (" + std::to_string(file_bytes) + " bytes)");
  if (std::memcmp(h.magic, index_magic, 8) != 0) bad("not a deepwell vector index (bad magic)");
  if (h.version != index_version)
    bad("index format version " + std::to_string(h.version) + " (this build reads " + std::to_string(index_version) +
        "; build the index again)");
  if (h.header_bytes != sizeof(index_header)) bad("header size " + std::to_string(h.header_bytes));
  if (header_crc(h) != h.header_crc) bad("the header does not match its checksum");
  if (h.count == 0 || h.count >= 0xFFFFFFFFull) bad("vector count " + std::to_string(h.count) + " out of range");
  if (h.dim == 0 || h.dim > max_dim) bad("dimension " + std::to_string(h.dim) + " out of range (1 to 4096)");
  if (uint32_t(h.type) > 2) bad("unknown vector type " + std::to_string(uint32_t(h.type)));
  if (uint32_t(h.distance) > 1) bad("unknown metric " + std::to_string(uint32_t(h.distance)));
  if (h.degree == 0 || h.degree > max_degree) bad("degree " + std::to_string(h.degree) + " out of range (1 to 256)");
  if (h.record_bytes != record_bytes_for(h.dim, h.type, h.degree)) bad("record size does not match dim and degree");
  if (h.page_bytes < 4096 || (h.page_bytes & (h.page_bytes - 1)) || h.page_bytes < h.record_bytes)
    bad("page size " + std::to_string(h.page_bytes) + " (a power of two >= 4096 holding a record)");
  if (h.records_per_page != h.page_bytes / h.record_bytes) bad("records per page do not match the page");
  if (h.pq_subspaces == 0 || h.pq_sub_dim == 0 || uint64_t(h.pq_subspaces) * h.pq_sub_dim != h.dim)
    bad("quantiser subspaces do not divide the dimension");
  if (h.entry >= h.count) bad("entry node past the vectors");
  const uint64_t pages = (h.count + h.records_per_page - 1) / h.records_per_page;
  if (h.records_bytes != pages * h.page_bytes) bad("records section size does not match the count");
  if (h.codebook_bytes != uint64_t(h.pq_subspaces) * pq_centroids * h.pq_sub_dim * 4) bad("codebook size");
  if (h.codes_bytes != h.count * h.pq_subspaces) bad("codes section size does not match the count");
  if (h.labels_bytes != h.count * 4) bad("labels section size does not match the count");
  const uint64_t sums = section_sum_count(h.records_bytes) + section_sum_count(h.codebook_bytes) +
                        section_sum_count(h.codes_bytes) + section_sum_count(h.labels_bytes);
  if (h.sums_bytes != 4 * sums) bad("sums section size");
  auto within = [&](uint64_t at, uint64_t bytes, const char* name) {
    if (at < index_header_bytes || at > file_bytes || bytes > file_bytes - at)
      bad(std::string(name) + " section past the end of the file (truncated?)");
  };
  within(h.records_at, h.records_bytes, "records");
  within(h.codebook_at, h.codebook_bytes, "codebook");
  within(h.codes_at, h.codes_bytes, "codes");
  within(h.labels_at, h.labels_bytes, "labels");
  within(h.sums_at, h.sums_bytes, "sums");
  if (h.records_at % h.page_bytes) bad("records section not aligned to its pages");
}

index_file::index_file(const std::string& path) : path_(path) {
  const uint64_t size = uint64_t(detail::open_for_reading(path, "vector index").st.st_size);
  read_ = [path](void* to, uint64_t offset, uint64_t bytes) {
    detail::pread_all(detail::open_for_reading(path, "vector index").fd.get(), to, bytes, offset, path);
  };
  open(size);
}

index_file::index_file(const std::string& path, uint64_t file_bytes, reader read) : path_(path), read_(std::move(read)) {
  open(file_bytes);
}

void index_file::open(uint64_t size) {
  if (size < index_header_bytes)
    throw data_error(path_ + ": too short for a vector index (" + std::to_string(size) + " bytes)");
  read_(&h_, 0, sizeof h_);
  check_header(h_, size, path_);
  sums_.resize(h_.sums_bytes / 4);
  read_(sums_.data(), h_.sums_at, h_.sums_bytes);
  if (crc32c(0, sums_.data(), h_.sums_bytes) != h_.sums_crc)
    throw data_error(path_ + ": the sums section does not match its checksum");
}

namespace {
// Where section s lies in the file: {offset, bytes}.
std::pair<uint64_t, uint64_t> place_of(const index_header& h, index_section s) {
  switch (s) {
    case index_section::records: return {h.records_at, h.records_bytes};
    case index_section::codebook: return {h.codebook_at, h.codebook_bytes};
    case index_section::codes: return {h.codes_at, h.codes_bytes};
    case index_section::labels: return {h.labels_at, h.labels_bytes};
  }
  return {0, 0};
}
}  // namespace

uint64_t index_file::section_at(index_section s) const { return place_of(h_, s).first; }
uint64_t index_file::section_bytes(index_section s) const { return place_of(h_, s).second; }
uint64_t index_file::first_sum(index_section s) const {
  uint64_t first = 0;
  for (index_section t : all_sections) {
    if (t == s) break;
    first += section_sum_count(section_bytes(t));
  }
  return first;
}
std::vector<uint32_t> index_file::section_sums(index_section s) const {
  return sums_slice(sums_, first_sum(s), section_sum_count(section_bytes(s)));
}
uint64_t index_file::section_sums_at(index_section s) const { return h_.sums_at + 4 * first_sum(s); }

std::vector<uint8_t> index_file::read_section(index_section s) const {
  std::vector<uint8_t> bytes(section_bytes(s));
  read_(bytes.data(), section_at(s), bytes.size());
  const std::vector<uint32_t> sums = section_sums(s);
  verify_section(path_, section_name(s), section_at(s), bytes.data(), bytes.size(), sums.data());
  return bytes;
}

std::vector<float> index_file::read_codebook() const {
  const std::vector<uint8_t> b = read_section(index_section::codebook);
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}
std::vector<uint8_t> index_file::read_codes() const { return read_section(index_section::codes); }
std::vector<uint32_t> index_file::read_labels() const {
  const std::vector<uint8_t> b = read_section(index_section::labels);
  std::vector<uint32_t> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), b.size());
  for (const uint32_t l : out)
    if (l >= h_.count) throw data_error(path_ + ": a label past the vectors (" + std::to_string(l) + ")");
  return out;
}

void index_file::verify(unsigned threads) const {
  constexpr uint64_t chunk = 64ull << 20;  // a multiple of the sums' block
  std::vector<uint8_t> buf;
  for (index_section s : all_sections) {
    const std::vector<uint32_t> sums = section_sums(s);
    for (uint64_t at = 0; at < section_bytes(s); at += chunk) {
      const uint64_t n = std::min(chunk, section_bytes(s) - at);
      buf.resize(n);
      read_(buf.data(), section_at(s) + at, n);
      verify_section(path_, section_name(s), section_at(s) + at, buf.data(), n, sums.data() + at / file_sum_block,
                     threads);
    }
  }
}

}  // namespace deepwell::vectors
