// Several drives as one dataset, as users deploy storage: striped (RAID 0:
// the dataset's chunks dealt to the members in turn, so a stream of
// requests spreads over all of them) and mirrored (RAID 1: every member
// holds the whole dataset; reads spread over the members, writes go to all,
// a member that fails is reported and skipped). And a modelled drive for
// machines without an array: host memory behind a device model, one target
// per modelled drive, so the controller's scaling over drives can be
// measured where there are none.
//
// A namespace over an array is still one array to the GPU side: only the
// controller's target knows the members.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell {

// A stripe's chunk where its user names none, and the largest taken from a
// user (the server's TOML, the C ABI, Python): stated in defaults.hpp.
constexpr uint64_t default_stripe_chunk = defaults::builtin::stripe_chunk;
constexpr uint64_t max_stripe_chunk = defaults::builtin::max_stripe_chunk;

// chunk_bytes of the dataset go to each member in turn: byte b is in chunk
// c = b / chunk_bytes, on member c % members.size(), at (c / members.size())
// * chunk_bytes + b % chunk_bytes there. The size is the smallest member's
// whole chunks times the members; a request that spans chunks is split and
// completes when every piece has (its first error, if any). Writable when
// every member is. Throws deepwell::error naming the problem: no members, a
// null one, a chunk that is not a power of two of at least 512 bytes or not
// a multiple of a member's I/O alignment, a member smaller than one chunk.
std::shared_ptr<target> make_striped_target(std::vector<std::shared_ptr<target>> members, uint64_t chunk_bytes);

// Throws, naming both, where two of an array's member paths are the same
// file or device (same device and inode, links included): a stripe over
// one file twice writes half its chunks over the other half, a mirror of
// one file is no copy. `kind` ("stripe", "mirror") names the array.
void check_distinct_members(const std::vector<std::string>& paths, const std::string& kind);

// A mirror's view of its members, for reports.
struct mirror_member_state {
  std::string describe;  // the member's own description
  bool failed = false;   // an I/O error took it out of service
  std::string error;     // the first error it gave ("read at 4096: Input/output error")
  uint64_t reads = 0;    // reads it served
};

class mirror_target : public target {
 public:
  virtual std::vector<mirror_member_state> members() const = 0;
  virtual uint32_t failed_members() const = 0;
};

// Every member holds the whole dataset (the smallest member's size). A read
// goes to the next member in service, in turn; one that fails takes that
// member out of service and is retried on the next, so a read fails only
// when every member has. A write or flush goes to every member in service
// and succeeds when at least one did (the mirror runs degraded); the
// members that failed leave service. describe() and members() say which
// failed and why, and the controller's log line names them once. Throws
// deepwell::error for no members, a null one, or members whose
// writability differs.
std::shared_ptr<mirror_target> make_mirrored_target(std::vector<std::shared_ptr<target>> members);

// A drive as a device model sees it. Each command takes a turn of the
// drive's throughput (1 / iops, or bytes / bandwidth if longer; writes
// write_penalty times that), starting when the drive is free and the
// command has arrived, and completes latency_ns after its turn starts plus
// a random tail (exponential, mean latency_ns * tail); at most queue_depth
// commands run at once (the rest wait for the earliest to finish).
struct drive_model {
  uint64_t iops = 1'500'000;
  uint64_t bandwidth_bytes = 7'000'000'000;  // bytes a second
  uint64_t latency_ns = 80'000;
  double tail = 0.25;
  uint32_t queue_depth = 1024;
  double write_penalty = 2.0;
  uint64_t seed = 1;  // of the latency tails' random numbers
};

// Host memory (zeroed, `bytes` long) behind `model`. Completions are
// delivered by timers on the calling poller's io engine, one timer for the
// earliest of a poller's waiting commands, so the model costs the
// controller little next to the commands it times. Throws deepwell::error
// for a model with zero iops, bandwidth or queue depth.
std::shared_ptr<target> make_model_drive_target(uint64_t bytes, const drive_model& model, bool writable = true);

}  // namespace deepwell
