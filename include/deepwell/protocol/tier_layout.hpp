// One dataset's part of the server's host-memory tier (host_tier.hpp) as
// shared memory: a memfd that the server writes and that clients granted
// the dataset map read-only, so that a GPU (or CPU) client copies a resident
// page straight from it with no command to the controller: the direct tier,
// across processes.
//
// Layout (offsets in the header, each 4 KiB-aligned):
//   header | index: uint32_t[pages] | seq: uint64_t[frames] |
//   data: frames * page_bytes
// index[p] is 1 + the frame holding page p, or 0. Each frame has a
// sequence lock whose word also names the frame's page: (page + 1) << 24
// | a 24-bit count (0 above it: no page), the count odd while the frame
// changes. The server (the only writer, under its mutex) makes the count
// odd, changes the frame's bytes, then
// stores the new page with the count moved on by two; dropping a page (a
// write to it, an eviction) moves it on as well. A reader loads seq[f]
// once: even, and naming its page, it copies the frame and keeps the copy
// only if seq[f] has not moved: whatever it kept is a page the server held,
// whole, at one instant (the word would come back only after 2^23 changes
// of that frame during one copy). One word, not a count and a page number:
// each is a round trip over PCIe from a GPU. index is only a hint (seq
// decides), so a reader never needs the server's lock.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell {

constexpr uint64_t tier_magic = 0x5245495457445744ull;  // "DWDWTIER"
constexpr uint32_t tier_layout_version = 2;
constexpr uint64_t tier_no_page = ~uint64_t(0);

// A frame's sequence word (above).
constexpr unsigned tier_count_bits = 24;
constexpr uint64_t tier_count_mask = (uint64_t(1) << tier_count_bits) - 1;
constexpr uint64_t tier_max_pages = (uint64_t(1) << (64 - tier_count_bits)) - 1;  // page + 1 must fit
DW_HD constexpr uint64_t tier_seq_word(uint64_t page_plus_1, uint64_t count) {
  return page_plus_1 << tier_count_bits | (count & tier_count_mask);
}

struct tier_header {
  uint64_t magic;
  uint32_t version;
  uint32_t page_bytes;
  uint64_t pages;   // the dataset's pages (index entries); the last one, if partial, is never held
  uint64_t frames;  // pages the arena holds
  uint64_t index_offset, seq_offset, data_offset;
  uint64_t bytes;   // the whole arena
};

// Where everything of an arena of `frames` frames over `pages` pages lies.
struct tier_geometry {
  uint64_t index_offset, seq_offset, data_offset, bytes;
  static constexpr uint64_t align(uint64_t v) { return (v + 4095) / 4096 * 4096; }
  static constexpr tier_geometry of(uint64_t pages, uint64_t frames, uint32_t page_bytes) {
    tier_geometry g{};
    g.index_offset = align(sizeof(tier_header));
    g.seq_offset = align(g.index_offset + pages * 4);
    g.data_offset = align(g.seq_offset + frames * 8);
    g.bytes = g.data_offset + frames * page_bytes;
    return g;
  }
};

// A reader's view of an arena (by value in a dataset's descriptor):
// pointers in the reader's address space (device pointers for a GPU).
struct tier_ref {
  const uint32_t* index = nullptr;
  const uint64_t* seq = nullptr;
  const uint8_t* data = nullptr;
  uint64_t pages = 0;
  uint32_t frames = 0;
  uint32_t page_shift = 0;

  DW_HD bool attached() const { return index != nullptr; }

  // If page p is resident: its frame and the frame's sequence word, to
  // copy from frame_data(frame) and then check with still().
  DW_HD bool begin(uint64_t p, uint32_t& frame, uint64_t& version) const {
    if (p >= pages) return false;
    const uint32_t e = shared_load_relaxed(index + p);
    if (e == 0 || e > frames) return false;
    frame = e - 1;
    version = shared_load_acquire(seq + frame);
    if (version & 1) return false;  // being changed
    return version >> tier_count_bits == p + 1;
  }
  DW_HD const uint8_t* frame_data(uint32_t frame) const { return data + (uint64_t(frame) << page_shift); }
  // True if the frame did not change since begin(): the copy made in
  // between is the page, whole. The fence keeps the copy's loads (made by
  // this thread, or by its warp before a barrier) before the check.
  DW_HD bool still(uint32_t frame, uint64_t version) const {
    cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_system);
    return shared_load_relaxed(seq + frame) == version;
  }
};

}  // namespace deepwell
