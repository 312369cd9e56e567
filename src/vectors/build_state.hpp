// What a vector index build has done so far, kept beside the index
// (INDEX.build) after each phase, so that a build interrupted (a crash, a
// kill, a cancel) resumes from its last finished phase: the same input and
// options give the same file either way (the build is deterministic).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/vectors/build.hpp"

namespace deepwell::vectors {

struct build_state {
  uint32_t phases = 0;  // done: build_report::resumed_phases says what each is
  std::vector<float> codebook;
  std::vector<uint8_t> codes;
  std::vector<std::vector<uint32_t>> adj;  // from phase 2 (sharded: rows of shards not yet merged have none)
};

// What a build's result depends on: the vectors' bytes (their CRC-32C),
// their shape, the metric, and the options that shape the index (sharded:
// the shards' size and the passes, which shape each shard's graph).
uint64_t build_fingerprint(const vector_set& data, metric m, const build_options& o, uint32_t subspaces,
                           uint64_t shard_vectors);

// The state saved at `file` for this fingerprint; phases 0 where there is
// none, it is another build's, or it does not match its checksum (then the
// build starts over).
build_state load_build_state(const std::string& file, uint64_t fingerprint, uint64_t count, uint32_t degree);

// Saves the state (to file + ".tmp", synced, renamed); throws naming the
// file when it cannot.
void save_build_state(const std::string& file, uint64_t fingerprint, uint64_t count, uint32_t phases,
                      const std::vector<float>& codebook, const std::vector<uint8_t>& codes,
                      const std::vector<std::vector<uint32_t>>& adj, uint32_t degree);

}  // namespace deepwell::vectors
