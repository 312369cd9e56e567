// Block sums of read-only files (version 2 of the .dwg graph file and of the
// column file): each data section of the file has a CRC-32C per 4 KiB block
// in the file's sums section, in the stored form of block_sum()
// (checksummed_target.hpp), so that the same sums serve two readers:
//
//   - CPU readers of a mapping check a section with verify_section(), once,
//     before they use its bytes;
//   - the controller checks every page it reads: checked_section() wraps the
//     section's file target in a checksummed_target whose sums are a copy in
//     host memory.
//
// A section's last block may be partial: its sum covers the block completed
// with zeros (the file's padding as the writers leave it). Bytes of padding
// are no section's data, so they are not checked; a reader never sees them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/protocol/status.hpp"
#include "deepwell/targets/checksummed_target.hpp"

namespace deepwell {

inline constexpr uint32_t file_sum_block = 4096;

// Sums a section of `bytes` bytes has (one a 4 KiB block, the last one partial or not).
inline uint64_t section_sum_count(uint64_t bytes) { return (bytes + file_sum_block - 1) / file_sum_block; }

// The stored sums of `bytes` bytes at `data`: section_sum_count(bytes) of
// them to `out`. `threads`: 0 for every core.
void section_sums(const void* data, uint64_t bytes, uint32_t* out, unsigned threads = 0);

// The first block of the section that does not match its sum, or UINT64_MAX
// when all do. `advance` (may be empty) is told of bytes checked, from
// several threads, for progress output.
uint64_t first_bad_block(const void* data, uint64_t bytes, const uint32_t* sums, unsigned threads = 0,
                         const std::function<void(uint64_t)>& advance = {});

// Checks a section mapped at `data` (at byte `file_offset` of the file);
// throws deepwell::data_error "FILE: SECTION: bytes [a, b) do not match their
// checksum ..." naming the first bad block.
void verify_section(const std::string& file, const std::string& section, uint64_t file_offset, const void* data,
                    uint64_t bytes, const uint32_t* sums, unsigned threads = 0,
                    const std::function<void(uint64_t)>& advance = {});

// A section's sums read from a file's sums section: `count` sums starting
// at sum `first` of `all`.
inline std::vector<uint32_t> sums_slice(const std::vector<uint32_t>& all, uint64_t first, uint64_t count) {
  return {all.begin() + int64_t(first), all.begin() + int64_t(first + count)};
}

// The section's target (a read-only file target at the section's offset and
// length) checked against its sums (a copy of section_sum_count(size) sums):
// every read of a block that does not match completes with -EBADMSG (the
// controller's End-to-end Guard Check Error). Its read-only mapping (the
// cache's direct tier) is handed out only when the whole section is in
// memory and matches its sums: see the .cpp for why.
std::shared_ptr<checksummed_target> checked_section(std::shared_ptr<target> section, const std::vector<uint32_t>& sums);

// Whether a failed read was a block that did not match its sum (the
// controller's End-to-end Guard Check Error), for messages that say "corrupt".
inline bool corrupt_block(const request_status& e) {
  return e.code == client_code::nvme_error && e.nvme == nvme::sc::guard_check_error;
}

}  // namespace deepwell
