// Block checksums for any target, kept in a second target: every block of
// the data has a 4-byte CRC-32C in the sums region, computed when the block
// is written and checked when it is read. A block whose bytes no longer
// match fails its read with -EBADMSG (the controller reports NVMe's
// End-to-end Guard Check Error), so flipped, zeroed or misplaced bytes are
// an error rather than data.
//
// The sums live in memory while the target is open and reach the sums
// region at flush(), together with the data: a power cut between flushes
// can leave blocks written since the last flush that do not match their
// stored sums. A store that knows which blocks those are (a write-ahead log
// replays them) reads them with verification off and rewrites them; see
// set_verify().
//
// A stored sum is the block's CRC-32C xor that of a zero block, so a region
// of zeros (a new file) is valid with a sums region of zeros: creating a
// large store writes neither.
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/targets/target.hpp"

namespace deepwell {

class checksummed_target : public target {
 public:
  // Bytes covered by one sum. Every read and write is whole blocks.
  virtual uint32_t block_bytes() const = 0;
  // Off: reads are not checked (recovery of blocks a crash may have left
  // without their sums); writes always set sums.
  virtual void set_verify(bool on) = 0;
  // Blocks that failed verification so far, and the last of them.
  virtual uint64_t mismatches() const = 0;
  virtual uint64_t last_mismatch_block() const = 0;
};

// The sums region needs checksum_region_bytes(data->size(), block) bytes.
// Writable data is a whole number of blocks; read-only data may end in a
// partial block, whose sum covers it completed with zeros. Reads the
// stored sums now (throws deepwell::error naming the targets if it cannot).
std::shared_ptr<checksummed_target> make_checksummed_target(std::shared_ptr<target> data,
                                                            std::shared_ptr<target> sums, uint32_t block_bytes);

// 4 bytes a block, rounded up to 4 KiB.
uint64_t checksum_region_bytes(uint64_t data_bytes, uint32_t block_bytes);

// The stored sum of one block of `bytes` bytes (writers of checksummed files).
uint32_t block_sum(const void* block, uint32_t bytes);

}  // namespace deepwell
