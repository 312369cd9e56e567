// A disk with a volatile write cache, for crash testing.
//
// Why: a crash test has to tell "durable" from "completed". Killing the
// process (kill -9) cannot: the OS page cache outlives the process, so every
// completed write survives whether it was flushed or not, and a missing
// flush goes unnoticed. This target models the part that a power cut loses.
// Completed writes sit in a volatile cache above a durable medium; a flush
// (or a Force Unit Access write) moves them to the medium; a simulated power
// cut (`cut`) decides which unflushed writes reached the medium anyway, and
// the test then reads the medium (`durable_image`, or `revive` and read it
// through the controller) to check that what the code under test promised
// to be durable is there.
//
// The model:
//  - durable medium: the bytes that survive a power cut;
//  - volatile cache: every completed write not yet made durable, kept as a
//    record in arrival order (so a cut can choose among them), plus the
//    current contents (medium + cache) that reads see;
//  - a write completes at once (its callback is called before write()
//    returns) and lands in the cache; with `fua` it is also applied to the
//    medium at once and never takes part in a cut. A FUA write supersedes
//    the bytes it overlaps in earlier unflushed writes (their older data can
//    no longer reach the medium, as on a disk whose cache holds one copy of
//    each block); later unflushed writes over it still sit above it, and a
//    cut may lose them, leaving the FUA data;
//  - a flush makes every write completed before it durable (applied to the
//    medium in arrival order) and empties the cache;
//  - a power cut (`cut`, or armed with `cut_at_request`) applies to the
//    medium what its mode keeps of the unflushed writes, empties the cache
//    and fails every later request (read, write, flush) with -EIO until
//    `revive`, which powers the disk on again with the medium's contents.
//
// The modes (`power_cut::mode`), from most to least orderly:
//  - drop_all: the cache is lost whole; the medium is exactly what was
//    flushed (and written with FUA). Models a disk that never destages on
//    its own, and is the one to use for "did every durable promise come with
//    a flush?".
//  - keep_random: each unflushed write reached the medium with probability
//    `keep_fraction`, whole, and the kept ones landed in a random order (not
//    necessarily the order they were written; so of two overlapping writes
//    the older may land last). Models a disk destaging its cache in its own
//    order when the power went. Anything a careful protocol may rely on
//    without a flush (nothing) is all it can rely on here.
//  - torn: as keep_random, and then a kept write may be torn: with
//    probability 1/2 it lands whole, otherwise each of its sectors lands
//    independently with probability 1/2. A sector is the unit of atomicity:
//    sectors are aligned to multiples of `sector` bytes on the disk, a sector
//    of a write either lands with all of that write's bytes in it or not at
//    all (a write that is not sector-aligned tears at the sector boundaries
//    inside it). Models the power failing mid-transfer.
// The choices come from std::mt19937_64 seeded with `seed`, with no
// standard-library distribution in between, so the same writes and the same
// `power_cut` give the same medium on every platform. (Which writes arrive
// in which order is up to the caller: with several controller pollers it is
// not deterministic.)
//
// The target holds two images of the disk (the medium and the current
// contents) plus the unflushed writes' bytes, so it is for test-sized disks.
// It is thread-safe (several pollers call it at once); every request
// completes before its call returns, with the target's lock released.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "deepwell/targets/target.hpp"

namespace deepwell {

// How a power cut treats the writes in the volatile cache.
struct power_cut {
  enum mode_t : uint32_t {
    drop_all,     // every write not yet flushed is lost
    keep_random,  // each unflushed write survives whole with probability keep_fraction, applied in a random order (reordered)
    torn,         // as keep_random, and each surviving write may be torn: only a random subset of its sectors lands
  } mode = drop_all;
  uint64_t seed = 1;
  double keep_fraction = 0.5;  // keep_random and torn; from 0 to 1
};

class volatile_cache_target : public target {
 public:
  // The durable medium: what survives a power cut. Caller-visible copy.
  virtual std::vector<uint8_t> durable_image() const = 0;
  // Cuts the power now: the durable medium gets what the mode keeps of the
  // unflushed writes; the volatile cache is emptied; from now on every
  // request (read, write, flush) fails with -EIO until revive(). Disarms a
  // cut armed with cut_at_request. On a disk already cut, does nothing.
  // Throws deepwell::error for a mode it does not know or a keep_fraction
  // outside [0, 1].
  virtual void cut(const power_cut& how) = 0;
  // Arms an automatic cut: the `n`-th write or flush request from now (1 =
  // the next one) is not performed; the cut happens just before it (the
  // request fails with -EIO, as do all after it). 0 disarms. Only requests
  // that arrive while the power is on count (those a dead disk refuses do
  // not). Arming again replaces the earlier arm. Throws as cut() does.
  virtual void cut_at_request(uint64_t n, const power_cut& how) = 0;
  // Whether the power is cut (requests fail with -EIO).
  virtual bool dead() const = 0;
  // Powers the disk back on: the volatile state equals the durable medium;
  // requests work again. Does nothing to a disk that is not dead.
  virtual void revive() = 0;
  // Writes sitting in the volatile cache (not yet made durable by a flush or
  // FUA). A write whose every byte was superseded by a later FUA write no
  // longer counts: nothing of it can reach the medium.
  virtual uint64_t unflushed_writes() const = 0;
  // Flush requests performed (those that completed with success).
  virtual uint64_t flushes() const = 0;
  // Write and flush requests seen while the power was on, whatever their
  // outcome (including the one an armed cut stopped): the numbering that
  // cut_at_request counts in. Run a workload once, read requests(), then
  // rerun it with cut_at_request(k) for each k up to that.
  virtual uint64_t requests() const = 0;
};

// A disk of `bytes` bytes (zeroed), sector size `sector` (torn writes tear at
// this granularity; io_alignment() and memory_alignment() are 1 all the
// same). Or starting from an existing durable image. Throws deepwell::error
// for a sector size of 0.
// The target: writable; host_pointer() and map_readonly() are nullptr (no
// reader may bypass the controller); reads past size() zero-fill, writes
// past it fail with -EINVAL; describe() says "volatile-cache disk (N bytes,
// M unflushed writes)".
std::shared_ptr<volatile_cache_target> make_volatile_cache_target(uint64_t bytes, uint32_t sector = 512);
std::shared_ptr<volatile_cache_target> make_volatile_cache_target(std::vector<uint8_t> image, uint32_t sector = 512);

}  // namespace deepwell
