// page_cache_ref, part: the fill of a missing page. A warp's leaders look
// their keys up in the directory; a leader that inserts a key claims a
// slot (clock.hpp) and reads the page into a command id's staging buffer,
// or copies it straight from host memory (the direct tier); the warp
// copies each page in and the leader publishes it with one release RMW.
// Also: prefetch, and the adoption of a fill whose reader left.
// Included by page_cache_ref.hpp only.
#pragma once

namespace deepwell {

struct page_cache_ref::fill_job {
  uint64_t key = empty_key;
  uint32_t step = step_done;
  uint32_t slot = ~0u;
  uint32_t qhint = 0;
  uint32_t queue = 0;
  uint16_t cid = 0;
  bool has_io = false;
  bool mine = true;  // the slot's key is the one asked for (false: an adopted orphan of another key)
  bool hit = false;   // found valid by probe (counted once per warp by acquire)
  bool from_tier = false;  // src is a host-tier frame: checked after the copy (tier_ref::still)
  uint32_t tier_frame = 0;
  uint64_t tier_version = 0;
  uint32_t cover = 0;  // bytes the caller overwrites from the page's start (acquire's `cover`)
  const uint8_t* cover_src = nullptr;  // those bytes (acquire's `cover_src`)
  bool from_caller = false;  // src is cover_src: the caller's memory, any alignment, any space
  const uint8_t* src = nullptr;
  uint32_t bytes = 0;
  request_status status{};
#if DW_CACHE_PHASE_TIMING
  uint64_t t_phase = 0;  // when the current phase of a controller fill began
#endif
};

// The hit path, kept small (it is inlined into every access): the
// bucket's keys four at a time with their slots (relaxed: the directory is
// a hint, checked below), a pin with acquire (not acq_rel: nothing before
// it needs publishing, and a release would first wait for this thread's
// last unpin to reach L2), then the slot's own state and key. Anything
// else (pending, busy, evicting, reused) drops the pin and leaves the page
// to acquire_rest.
DW_HD DW_FORCEINLINE bool page_cache_ref::try_hit(uint64_t key, uint32_t& slot) const {
  uint32_t s;
  if (!dir.find_slot(key, dir.bucket_of(key), s) || s == dir_pending) return false;
  client_atomic<uint64_t> st(state[s]);
  const slot_word old = st.fetch_add(1, memory_order_acquire);
  if ((old & slot_state::valid) && !(old & slot_state::evict) &&
      client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed) == key) {
    if (!(old & slot_state::use)) st.fetch_or(slot_state::use, memory_order_relaxed);
    slot = s;
    return true;
  }
  st.fetch_sub(1, memory_order_release);
  return false;
}

// read_hit (page_cache_ref.hpp says what it checks). Why it is safe with no
// pin: an evictor claims the slot with a CAS and, before the slot's key or
// bytes change, raises its generation and clears valid in one RMW
// (evict_claimed); the fill that overwrites the bytes comes after that
// (claim_slot's release RMW). So if the data read saw any byte of a later
// page, the second read of the state word, ordered after the data and
// the key (zero_after_loads of both), sees the new generation; ordered
// after the key too, since a key read late could see a later fill of the
// same page into the slot (the directory entry may be stale). The first read, with
// acquire, makes the bytes of the fill that published `valid` visible. A
// racing eviction makes the data read a discarded race, not a wrong answer
// (detail::racy_load, uninstrumented under ThreadSanitizer).
//
// Through a hint the first read of the state word is not needed: the hint's
// release store came after the fill's data and its `valid`, so acquiring
// the hint makes the data visible, and the hint names the generation the
// slot had then. The state word read after the data and the slot key (the
// load's address depends on both) still has that generation only if no
// evictor claimed the slot before those reads; the key check rejects a
// hint that another page's fill of the same slot, or of another page
// sharing the entry, left behind.
template <class T>
DW_HD DW_FORCEINLINE bool page_cache_ref::read_hit(uint64_t key, uint32_t offset, T& out) const {
  page_sight at;
  return read_seen(key, offset, at, out);
}

// Later reads of a page the lane has seen need no acquire of their own: the
// first one's acquire ordered the fill's bytes (all of the page's) before
// it, and the fill that could replace them comes only after an evictor
// raised the generation, which each read's state word would show.
//
// The first read's two paths are written out, not shared through
// read_slot: with read_slot inlined into both, all-hit reads (nearly all
// through hints) ran 2-9% slower on an H200, the same loads in the same
// order (bench/results/2026-11-26-3ea65e0-h200-hit-bisect.json); the
// compiler's code for the joined form is what cost.
template <class T>
DW_HD DW_FORCEINLINE bool page_cache_ref::read_seen(uint64_t key, uint32_t offset, page_sight& at, T& out) const {
  if (at.slot != page_sight::none) return read_slot(at.slot, key, offset, at.gen, out);
  {
    const uint64_t h = client_atomic<uint64_t>(hint_of(key)).load(memory_order_acquire);
    const uint32_t hs = hint_slot(h);
    if (hs < nslots_) {
      const uint64_t k = client_atomic<uint64_t>(slot_key[hs]).load(memory_order_relaxed);
      const T v = detail::racy_load<T>(page_data(hs) + offset);
      const slot_word now =
          client_atomic<uint64_t>(state[hs + (zero_after_loads(v, opaque_zero) | zero_after_loads(k, opaque_zero))]).load(memory_order_relaxed);
      if (k == key && (now & slot_state::valid) && slot_state::gen(now) == hint_generation(h)) {
        note_use(hs, now);
        at.slot = hs;
        at.gen = hint_generation(h);
        out = v;
        return true;
      }
    }
  }
  uint32_t s;
  if (!dir.find_slot(key, dir.bucket_of(key), s) || s == dir_pending) return false;
  const slot_word before = client_atomic<uint64_t>(state[s]).load(memory_order_acquire);
  if (!(before & slot_state::valid)) return false;
  const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  const T v = detail::racy_load<T>(page_data(s) + offset);
  const slot_word after =
      client_atomic<uint64_t>(state[s + (zero_after_loads(v, opaque_zero) | zero_after_loads(k, opaque_zero))]).load(memory_order_relaxed);
  if (k != key || slot_state::gen(after) != slot_state::gen(before)) return false;
  note_use(s, after);
  at.slot = s;
  at.gen = slot_state::gen(before);
  out = v;
  return true;
}

// A later read of a page read_seen found: the state word is read after the
// key and the data (its address depends on both); if it still has
// generation `gen` and is valid, no evictor claimed the slot before those
// reads.
template <class T>
DW_HD DW_FORCEINLINE bool page_cache_ref::read_slot(uint32_t s, uint64_t key, uint32_t offset, uint32_t gen,
                                                    T& out) const {
  const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  const T v = detail::racy_load<T>(page_data(s) + offset);
  const slot_word now =
      client_atomic<uint64_t>(state[s + (zero_after_loads(v, opaque_zero) | zero_after_loads(k, opaque_zero))]).load(memory_order_relaxed);
  if (k != key || !(now & slot_state::valid) || slot_state::gen(now) != gen) return false;
  out = v;
  return true;
}

// CLOCK's use bit after a pin-free read, only with a CAS on the state word
// just read and only while no evictor has claimed the slot: holding no pin,
// a fetch_or could land after an evictor took it, and the fill then
// publishes with arithmetic that expects use clear (use + use carries into
// error). A CAS that fails (pins moved) leaves the bit unset: it is a hint.
DW_HD DW_FORCEINLINE void page_cache_ref::note_use(uint32_t s, slot_word seen) const {
  if (seen & (slot_state::use | slot_state::evict)) return;
  client_atomic<uint64_t>(state[s]).compare_exchange_strong(seen, seen | slot_state::use, memory_order_relaxed);
}

template <class T, class Warp>
DW_HD DW_FORCEINLINE request_status page_cache_ref::read_element(const Warp& w, bool want, uint64_t key,
                                                                 uint32_t offset, T& out) const {
  const unsigned mask = w.active();
  // Which lanes read is known before any load: one ballot of the two here
  // waits for nothing.
  const unsigned wanted = w.ballot(mask, want);
  const bool hit = want && read_hit(key, offset, out);
  const unsigned missed = w.ballot(mask, want && !hit);
  // Counted once per warp: each lane that read with no pin is one access
  // and one hit (acquire counts the others).
  if (wanted != missed && w.lane() == lowest_lane(mask))
    client_atomic<unsigned long long>(shard(w).hit_reads)
        .fetch_add(popcount32(wanted) - popcount32(missed), memory_order_relaxed);
  if (!missed) return want ? request_status{} : request_status::client(client_code::invalid_argument);
  const warp_pin p = acquire(w, want && !hit, key);
  if (want && !hit && p.status.ok()) out = *reinterpret_cast<const T*>(page_data(p.slot) + offset);
  release(w, p, false);
  return hit ? request_status{} : p.status;
}

template <class Warp>
DW_HD DW_FORCEINLINE warp_pin page_cache_ref::acquire(const Warp& w, bool want, uint64_t key, uint32_t accesses,
                                                      uint32_t cover, const void* cover_src) const {
  warp_pin out;
  out.mask = w.active();
  const unsigned lane = w.lane();
  const unsigned peers = w.match_any(out.mask, want ? key : empty_key);
  out.peers = peers;
  out.leader = lowest_lane(peers);
  const bool lead = want && lane == out.leader;
  // Every leader's page valid at its first lookup: nothing else runs (no
  // deadline, no fill loop; acquire_rest is out of line, so a kernel
  // capped in registers spills there and not here).
  uint32_t slot = ~0u;
  const bool hit = lead && try_hit(key, slot);
  if (w.ballot(out.mask, lead && !hit)) return acquire_rest(w, want, key, accesses, cover, cover_src, out, hit, slot);
  return finish_acquire(w, out, want, accesses, lead, slot, request_status{}, lead);
}

// The end of acquire, either way: accesses and hits counted once per warp,
// not once per leader (in a random all-hit pattern every lane leads, and
// 64 atomics on one statistics line per warp access cost more than the
// lookups), then each leader's slot and status handed to its peers.
template <class Warp>
DW_HD DW_FORCEINLINE warp_pin page_cache_ref::finish_acquire(const Warp& w, warp_pin out, bool want, uint32_t accesses,
                                                             bool hit, uint32_t slot, request_status status,
                                                             bool owner) const {
  const unsigned wanted = w.ballot(out.mask, want);
  const unsigned hits = w.ballot(out.mask, hit);
  if (w.lane() == lowest_lane(out.mask)) {
    cache_stats_shard& sh = shard(w);
    if (wanted && accesses)
      client_atomic<unsigned long long>(sh.accesses).fetch_add(uint64_t(accesses) * popcount32(wanted), memory_order_relaxed);
    if (hits) client_atomic<unsigned long long>(sh.hits).fetch_add(popcount32(hits), memory_order_relaxed);
  }
  out.slot = w.shfl(out.mask, slot, out.leader);
  out.status = request_status::unpack(w.shfl(out.mask, status.pack(), out.leader));
  out.owner = owner;
  if (!want) out.status = request_status::client(client_code::invalid_argument);
  // The leader's acquire (pin or fill) ordered the page's data; the lanes
  // that read it are ordered after it by this barrier.
  w.sync(out.mask);
  return out;
}

template <class Warp>
DW_HD DW_NOINLINE warp_pin page_cache_ref::acquire_rest(const Warp& w, bool want, uint64_t key, uint32_t accesses,
                                                        uint32_t cover, const void* cover_src, warp_pin out, bool hit,
                                                        uint32_t slot) const {
  const unsigned lane = w.lane();
  const unsigned peers = out.peers;
  const bool lead = want && lane == out.leader;
  const uint64_t dl = deadline();
  cache_stats_shard& sh = shard(w);
  fill_job job;
  job.key = key;
  job.qhint = w.queue_hint();
  job.step = lead && !hit ? step_probe : step_done;
  if (lead && hit) {
    job.hit = true;
    job.slot = slot;
  }
  // An overwrite only if every lane asking for the page overwrites it.
  const unsigned partial = w.ballot(out.mask, want && cover == 0);
  job.cover = (partial & peers) ? 0 : cover;
  job.cover_src = static_cast<const uint8_t*>(cover_src);
  for (uint32_t round = 0;; ++round) {
    bool progress = false;
    if (job.step == step_probe) progress |= probe(job, sh);
    if (job.step == step_issue) progress |= issue(job);
    // The warp copies each page in as soon as its read completes, so that
    // command ids (the in-flight budget) go back early.
    for (uint32_t spin = 0;; ++spin) {
      if (job.step == step_fill && job.has_io && !job.src) poll_io(job, dl);
      w.sync(out.mask);
      unsigned fills = w.ballot(out.mask, job.step == step_fill && job.src);
      const bool any = fills != 0;
      while (fills) {
        const unsigned f = lowest_lane(fills);
        fills &= fills - 1;
        const uint32_t s = w.shfl(out.mask, job.slot, f);
        const uint8_t* src = reinterpret_cast<const uint8_t*>(shfl64(w, out.mask, uint64_t(job.src), f));
        const uint32_t bytes = w.shfl(out.mask, job.bytes, f);
        if (w.shfl(out.mask, uint32_t(job.from_caller), f))
          detail::copy_in_any(w, out.mask, page_data(s), src, bytes, page_size_);
        else
          detail::copy_in(w, out.mask, page_data(s), src, bytes, page_size_);
        w.sync(out.mask);
        if (lane == f) finish_fill(job);
      }
      if (!w.ballot(out.mask, job.step == step_fill)) break;
      progress |= any;
      if (!any) backoff(spin);
    }
    // Pages other threads are fetching (this warp holds no command id now).
    if (job.step == step_wait) progress |= await_other(job);
    const bool pending = job.step == step_probe || job.step == step_issue || job.step == step_wait;
    if (pending && now_ns() > dl) give_up(job);
    if (!w.ballot(out.mask, job.step != step_done && job.step != step_failed)) break;
    if (!progress) backoff(round);
  }
  return finish_acquire(w, out, want, accesses, lead && job.hit, job.slot, job.status, lead && job.step == step_done);
}

DW_HD inline void page_cache_ref::prefetch(uint64_t key, uint32_t qhint) const {
  const dataset_desc& d = datasets[key_dataset(key)];
  const uint8_t* mapped;
  uint64_t left;
  if (d.source.host_bytes(key_page(key), page_shift_, d.bytes, mapped, left)) return;  // no I/O latency to hide
  const uint32_t b = dir.bucket_of(key);
  if (dir.find(key, b) >= 0) return;
  const detail::dir_insert_result ins = dir.insert(key, b);
  if (!ins.inserted) return;
  uint32_t s = claim_slot(qhint);
  if (s == ~0u) {
    dir.remove(key, dir_pending);
    return;
  }
  client_atomic<uint64_t>(slot_key[s]).store(key, memory_order_relaxed);
  client_atomic<uint32_t>(dir.slots[ins.entry]).store(s, memory_order_release);
  const uint32_t qi = qhint % nqueues;
  const queue_ref& q = queues[qi];
  uint16_t cid;
  if (!q.try_acquire_cid(cid)) {
    // Without a command id there is nothing to start: hand the slot back.
    dir.remove(key, s);
    client_atomic<uint64_t>(state[s]).fetch_sub(slot_state::busy + 1, memory_order_release);
    return;
  }
  client_atomic<unsigned long long>(shard_of(qhint).misses).fetch_add(1, memory_order_relaxed);
  start_read(q, cid, key, qhint);
  orphan_io(s, qi, cid);
  client_atomic<uint64_t>(state[s]).fetch_add(slot_state::orphan - 1, memory_order_release);  // unpin, orphaned
}

// Ends phase i of a controller fill (DW_CACHE_PHASE_TIMING): adds its
// length and starts the next.
DW_HD inline void page_cache_ref::phase_end(fill_job& j, int i) {
#if DW_CACHE_PHASE_TIMING && DW_DEVICE_CODE
  const uint64_t t = now_ns();
  dw_cache_phase_add(i, t - j.t_phase);
  if (i == 3) dw_cache_phase_add(4, 1);
  j.t_phase = t;
#else
  (void)j, (void)i;
#endif
}

// Submits the read of `key`'s page into cid's staging buffer; returns the
// bytes it reads (the last page of a dataset may be short).
DW_HD inline uint32_t page_cache_ref::start_read(const queue_ref& q, uint16_t cid, uint64_t key, uint32_t qhint) const {
  const dataset_desc& d = datasets[key_dataset(key)];
  uint32_t nlb;
  const uint64_t lba = page_lba(d, key, nlb);
  q.submit(cid, nvme::make_read(d.nsid, lba, nlb, q.buffer_offset(cid)));
  const uint32_t bytes = nlb * d.block_size;
  client_atomic<unsigned long long>(shard_of(qhint).bytes_read).fetch_add(bytes, memory_order_relaxed);
  return bytes;
}

// The first LBA of the page of `key` and its block count (the last page
// of a dataset may hold fewer blocks).
DW_HD inline uint64_t page_cache_ref::page_lba(const dataset_desc& d, uint64_t key, uint32_t& nlb) const {
  const uint64_t lba = key_page(key) * d.blocks_per_page;
  const uint64_t left = d.blocks - lba;
  nlb = left < d.blocks_per_page ? uint32_t(left) : d.blocks_per_page;
  return lba;
}

// The bytes of `key`'s page that are part of its dataset.
DW_HD inline uint32_t page_cache_ref::page_bytes(uint64_t key) const {
  const dataset_desc& d = datasets[key_dataset(key)];
  uint32_t nlb;
  (void)page_lba(d, key, nlb);
  return nlb * d.block_size;
}

// One lookup of the leader's key; on a miss, inserts it, claims a slot
// and starts the fetch. Bounded work: returns with step_probe to try
// again next round. True if it changed the step.
DW_HD inline bool page_cache_ref::probe(fill_job& j, cache_stats_shard& sh) const {
  const uint32_t b = dir.bucket_of(j.key);
  for (uint32_t i = 0; i < 8; ++i) {
    const int64_t e = dir.find(j.key, b);
    if (e >= 0) {
      const uint32_t s = client_atomic<uint32_t>(dir.slots[e]).load(memory_order_acquire);
      if (s == dir_pending) return false;  // its inserter is claiming a slot
      client_atomic<uint64_t> st(state[s]);
      const slot_word old = st.fetch_add(1, memory_order_acq_rel);
      if ((old & slot_state::valid) && !(old & slot_state::evict)) {
        if (client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed) == j.key) {
          if (!(old & slot_state::use)) st.fetch_or(slot_state::use, memory_order_relaxed);
          j.hit = true;
          j.slot = s;
          j.step = step_done;
          return true;
        }
      } else if ((old & slot_state::busy) && !(old & slot_state::evict)) {
        client_atomic<unsigned long long>(sh.waits).fetch_add(1, memory_order_relaxed);
        j.slot = s;
        j.step = step_wait;
        return true;
      }
      st.fetch_sub(1, memory_order_release);  // evicting, failed, free, or reused for another key
      return false;
    }
    const detail::dir_insert_result ins = dir.insert(j.key, b);
    if (ins.full) {
      if (!evict_from_bucket(b, j.qhint)) return false;
      continue;
    }
    if (!ins.inserted) continue;  // another thread inserted it meanwhile: look again
    const uint32_t s = claim_slot(j.qhint);
    if (s == ~0u) {
      dir.remove(j.key, dir_pending);
      return false;
    }
    client_atomic<uint64_t>(slot_key[s]).store(j.key, memory_order_relaxed);
    client_atomic<uint32_t>(dir.slots[ins.entry]).store(s, memory_order_release);
    j.slot = s;
    j.mine = true;
    const dataset_desc& d = datasets[key_dataset(j.key)];
    client_atomic<unsigned long long>(sh.misses).fetch_add(1, memory_order_relaxed);
    if (j.cover && j.cover >= page_bytes(j.key)) {
      // Overwritten whole: no read (nor a copy from host memory on the
      // direct tier). The warp's fill copies the bytes the caller is about
      // to write (or, with none given, zeroes the slot: copy_in with 0
      // bytes), then publishes the page; until then nobody else sees it.
      j.from_caller = j.cover_src != nullptr;
      j.src = j.from_caller ? j.cover_src : page_data(s);
      j.bytes = j.from_caller ? page_bytes(j.key) : 0;
      j.has_io = false;
      j.step = step_fill;
      return true;
    }
    // The dataset's source (page_source.hpp): host memory where it maps
    // the page, a shared tier where the page is resident there (copied,
    // then checked in finish_fill), else a command to the controller.
    const uint8_t* mapped;
    uint64_t left;
    if (d.source.host_bytes(key_page(j.key), page_shift_, d.bytes, mapped, left)) {
      j.bytes = left < page_size_ ? uint32_t(left) : page_size_;
      j.src = mapped;
      j.has_io = false;
      j.step = step_fill;
      client_atomic<unsigned long long>(sh.direct_fills).fetch_add(1, memory_order_relaxed);
      client_atomic<unsigned long long>(sh.bytes_read).fetch_add(j.bytes, memory_order_relaxed);
      return true;
    }
    if (d.source.kind == page_source_kind::shared_tier &&
        d.source.tier.begin(key_page(j.key), j.tier_frame, j.tier_version)) {
      // Only whole pages are ever resident there.
      j.bytes = page_size_;
      j.src = d.source.tier.frame_data(j.tier_frame);
      j.from_tier = true;
      j.has_io = false;
      j.step = step_fill;
      return true;
    }
    j.step = step_issue;
#if DW_CACHE_PHASE_TIMING
    j.t_phase = now_ns();
#endif
    return true;
  }
  return false;
}

// Reads the leader's page into staging if a command id is free now.
DW_HD inline bool page_cache_ref::issue(fill_job& j) const {
  j.queue = j.qhint % nqueues;
  const queue_ref& q = queues[j.queue];
  uint16_t cid;
  const request_status a = get_cid(j.queue, j.qhint, cid, 0);
  if (!a.ok()) {
    if (a.code == client_code::controller_lost) {  // ids of commands sent after a stop never come back
      fail_fill(j, a);
      return true;
    }
    return false;
  }
  j.cid = cid;
  j.has_io = true;
  j.src = nullptr;  // set once the read completes
  phase_end(j, 0);  // waited for a command id
  j.bytes = start_read(q, cid, j.key, j.qhint);
  phase_end(j, 1);  // submitted
  j.step = step_fill;
  return true;
}

// Checks once whether the leader's read completed: sets src (the staging
// buffer) when it did, fails the fill when it failed.
DW_HD inline void page_cache_ref::poll_io(fill_job& j, uint64_t dl) const {
  wait_result r;
  if (queues[j.queue].try_wait(j.cid, dl, r)) io_done(j, r);
}

// Waits for the leader's read (single thread).
DW_HD inline void page_cache_ref::await_io(fill_job& j, uint64_t dl) const { io_done(j, queues[j.queue].wait(j.cid, dl)); }

// The read's outcome. On failure the fill fails (the slot is marked
// failed and leaves the directory).
DW_HD inline void page_cache_ref::io_done(fill_job& j, const wait_result& r) const {
  const queue_ref& q = queues[j.queue];
  if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
    j.has_io = false;  // the id is abandoned: the poller frees it when its completion arrives
    fail_fill(j, r.status);
    return;
  }
  if (!r.status.ok()) {
    q.release_cid(j.cid);
    j.has_io = false;
    fail_fill(j, r.status);
    return;
  }
  j.src = q.buffer(j.cid);
  phase_end(j, 2);  // the controller served it, and the completion was seen
}

// After the warp copied the page in: publish it, free the command id.
DW_HD inline void page_cache_ref::finish_fill(fill_job& j) const {
  if (j.from_tier) {
    j.from_tier = false;
    const dataset_desc& d = datasets[key_dataset(j.key)];
    if (!d.source.tier.still(j.tier_frame, j.tier_version)) {
      // The server dropped or reused the frame while the warp copied it:
      // what the slot holds may be torn. Read the page through the
      // controller instead (the slot stays claimed; the read overwrites it).
      client_atomic<unsigned long long>(shard_of(j.qhint).tier_retries).fetch_add(1, memory_order_relaxed);
      j.src = nullptr;
      j.step = step_issue;
#if DW_CACHE_PHASE_TIMING
      j.t_phase = now_ns();
#endif
      return;
    }
    cache_stats_shard& sh = shard_of(j.qhint);
    client_atomic<unsigned long long>(sh.tier_fills).fetch_add(1, memory_order_relaxed);
    client_atomic<unsigned long long>(sh.bytes_read).fetch_add(j.bytes, memory_order_relaxed);
  }
  if (j.has_io) {
    phase_end(j, 3);  // copied in from staging
    queues[j.queue].release_cid(j.cid);
    j.has_io = false;
  }
  // One release RMW: whoever sees `valid` sees the data. busy is set and
  // valid and use are clear here, so the sum changes just those bits.
  client_atomic<uint64_t> st(state[j.slot]);
  const slot_word was = st.fetch_add(slot_state::valid + slot_state::use - slot_state::busy, memory_order_release);
  // The page's hint, with release after the page is valid: a reader that
  // acquires it sees the data (read_hit). The slot is still pinned, so its
  // key and generation are the ones just published.
  client_atomic<uint64_t>(hint_of(client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed)))
      .store(make_hint(j.slot, slot_state::gen(was)), memory_order_release);
  if (j.mine) {
    j.step = step_done;
  } else {  // an adopted orphan of another page: done with it, look for ours
    st.fetch_sub(1, memory_order_release);
    j.slot = ~0u;
    j.step = step_probe;
  }
}

DW_HD inline void page_cache_ref::fail_fill(fill_job& j, request_status why) const {
  client_atomic<unsigned long long>(shard_of(j.qhint).errors).fetch_add(1, memory_order_relaxed);
  const uint64_t k = client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed);
  dir.remove(k, j.slot);
  client_atomic<uint32_t>(slot_io[j.slot]).store(why.pack(), memory_order_relaxed);
  // error set, busy cleared, the filler's pin dropped: one release RMW, so
  // a waiter that sees `error` also sees the status in slot_io.
  client_atomic<uint64_t>(state[j.slot]).fetch_add(slot_state::error - slot_state::busy - 1, memory_order_release);
  j.slot = ~0u;
  if (j.mine) {
    j.status = why;
    j.step = step_failed;
  } else {
    j.step = step_probe;
  }
}

// The leader pinned a slot another thread is filling: wait (bounded per
// round) until it is valid or failed, then check it holds our key.
DW_HD inline bool page_cache_ref::await_other(fill_job& j) const {
  client_atomic<uint64_t> st(state[j.slot]);
  for (uint32_t i = 0; i < 256; ++i) {
    const slot_word v = st.load(memory_order_acquire);
    if (v & slot_state::valid) {
      if (client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed) == j.key) {
        j.step = step_done;
      } else {
        st.fetch_sub(1, memory_order_release);
        j.slot = ~0u;
        j.step = step_probe;
      }
      return true;
    }
    if ((v & slot_state::error) || !(v & slot_state::busy)) {
      if ((v & slot_state::error) &&
          client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed) == j.key) {
        j.status = request_status::unpack(client_atomic<uint32_t>(slot_io[j.slot]).load(memory_order_relaxed));
        j.step = step_failed;
      } else {
        j.step = step_probe;  // abandoned (a prefetch without an id) or reused for another key
      }
      st.fetch_sub(1, memory_order_release);
      j.slot = ~0u;
      return true;
    }
    if ((v & slot_state::orphan) && take_orphan(j.slot)) {
      // Its reader left after submitting: finish its fill ourselves
      // (awaited and copied next round).
      j.mine = adopt_io(j, j.slot) == j.key;
      return true;
    }
    spin_pause();
  }
  return false;
}

// After take_orphan(s): makes j the filler of the orphan's read (its
// queue and command id are in slot_io). Returns the slot's key.
DW_HD inline uint64_t page_cache_ref::adopt_io(fill_job& j, uint32_t s) const {
  const uint32_t io = client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed);
  client_atomic<uint32_t>(orphans[io >> 16]).fetch_sub(1, memory_order_relaxed);
  const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  j.slot = s;
  j.queue = io >> 16;
  j.cid = uint16_t(io & 0xFFFF);
  j.has_io = true;
  j.src = nullptr;
  j.bytes = page_bytes(k);
  j.step = step_fill;
  return k;
}

// Ends a leader's job at its deadline.
DW_HD inline void page_cache_ref::give_up(fill_job& j) const {
  if (j.step == step_issue) {
    fail_fill(j, request_status::client(client_code::timeout));  // our own key: ends failed with this status
    return;
  }
  if (j.step == step_wait) {
    client_atomic<uint64_t>(state[j.slot]).fetch_sub(1, memory_order_release);
    j.slot = ~0u;
    j.status = request_status::client(client_code::timeout);
  } else {
    j.status = request_status::client(client_code::cache_exhausted);
  }
  j.step = step_failed;
}

// Finishes an orphaned prefetch the clock came across (single thread).
DW_HD inline void page_cache_ref::adopt_orphan(uint32_t s, uint32_t qhint) const {
  client_atomic<uint64_t>(state[s]).fetch_add(1, memory_order_acquire);
  fill_job j;
  j.qhint = qhint;
  j.key = adopt_io(j, s);
  await_io(j, deadline());
  if (j.step != step_fill) return;  // failed: the slot is marked and unpinned
  detail::copy_in(one_lane{}, 1u, page_data(s), j.src, j.bytes, page_size_);
  finish_fill(j);
  client_atomic<uint64_t> st(state[s]);
  st.fetch_and(~slot_state::use, memory_order_relaxed);  // not used yet: first to go
  st.fetch_sub(1, memory_order_release);
}

}  // namespace deepwell
