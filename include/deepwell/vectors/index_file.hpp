// A .dwv index file on the host: written by build_index (build.hpp), opened
// and checked here. Errors throw deepwell::error (deepwell::data_error for
// damaged bytes) naming the file and the problem.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deepwell/vectors/format.hpp"

namespace deepwell::vectors {

enum class index_section { records, codebook, codes, labels };
const char* section_name(index_section s);

// The header's checks against a file of `file_bytes` bytes; throws naming
// the first problem (`what` names the file).
void check_header(const index_header& h, uint64_t file_bytes, const std::string& what);
// The header's CRC-32C (its bytes before header_crc).
uint32_t header_crc(const index_header& h);

class index_file {
 public:
  // Reads `bytes` at `offset` of the file into `to`, or throws naming why.
  using reader = std::function<void(void* to, uint64_t offset, uint64_t bytes)>;

  // Reads the header and the sums section and checks both (magic, version,
  // sizes against the file, CRCs); the sections are read by the caller.
  explicit index_file(const std::string& path);
  // The same through `read`, for a file of `file_bytes` this process may
  // not open itself (a server's dataset, read over the link); `path` names
  // it in messages.
  index_file(const std::string& path, uint64_t file_bytes, reader read);

  const std::string& path() const { return path_; }
  const index_header& header() const { return h_; }
  uint64_t section_at(index_section s) const;
  uint64_t section_bytes(index_section s) const;
  // The section's 4 KiB block sums, and where they start in the file.
  std::vector<uint32_t> section_sums(index_section s) const;
  uint64_t section_sums_at(index_section s) const;

  // The codebook and the codes, read and checked against their sums.
  std::vector<float> read_codebook() const;
  std::vector<uint8_t> read_codes() const;
  // Each node's row in the vectors the index was built from.
  std::vector<uint32_t> read_labels() const;
  // Every block of every section against its sum (the records too).
  void verify(unsigned threads = 0) const;

 private:
  std::string path_;
  reader read_;
  index_header h_{};
  std::vector<uint32_t> sums_;
  void open(uint64_t file_bytes);
  uint64_t first_sum(index_section s) const;
  std::vector<uint8_t> read_section(index_section s) const;
};

}  // namespace deepwell::vectors
