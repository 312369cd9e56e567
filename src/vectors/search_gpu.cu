// The beam search kernel: search_cpu's semantics, a warp a query.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/vectors/data.hpp"
#include "deepwell/vectors/distance.hpp"
#include "deepwell/vectors/gpu_search.hpp"
#include "vectors/warp_lists.cuh"

namespace deepwell::vectors {

namespace {

struct kernel_params {
  index_view v;
  const float* queries;
  uint64_t nq;
  uint32_t k, list, width, cap, entry_sample;
  bool whole_pages, all_mates;
  uint32_t* ids;
  float* distances;
  unsigned long long* counts;  // search_counts' fields, in order
  uint64_t* seen;              // seen_slots a warp
  uint32_t seen_slots;         // search_seen_slots
  uint32_t* epochs;            // a warp's queries so far (tags its seen entries)
  uint8_t* hand;               // hand_per_warp bytes a warp: width fetches, pages or records
  uint64_t hand_per_warp;
  uint32_t fetch_stride;       // bytes a fetch in hand
  uint32_t* mates;             // mates_per_warp a warp (>= width x records a fetch): page mates to expand
  uint64_t mates_per_warp;
  float* done_d;               // done_slots a warp: the exact distances
  uint32_t* done_id;
  uint32_t done_slots;
  uint32_t* failed_node;       // the first node whose record could not be read
  uint32_t warp_smem;          // shared bytes a warp
};

__global__ void beam_search(kernel_params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const unsigned lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const uint64_t warp = uint64_t(blockIdx.x) * (blockDim.x >> 5) + wib, warps = uint64_t(gridDim.x) * (blockDim.x >> 5);
  const index_header& h = p.v.h;
  const uint32_t M = h.pq_subspaces;
  float* table = reinterpret_cast<float*>(smem + wib * p.warp_smem);
  float* q = table + M * pq_centroids;
  float* ld = q + h.dim;
  uint32_t* lid = reinterpret_cast<uint32_t*>(ld + p.list);
  uint32_t* picks = lid + p.list;
  uint32_t* fetched = picks + 32;  // the step's fetches: page numbers (or node ids), in fetch order
  uint32_t* fetched_for = fetched + 32;  // the pick each was fetched for
  uint8_t* lx = reinterpret_cast<uint8_t*>(fetched_for + 32);
  uint64_t* seen = p.seen + warp * p.seen_slots;
  uint8_t* hand = p.hand + warp * p.hand_per_warp;
  uint32_t* mates = p.mates + warp * p.mates_per_warp;
  float* dd = p.done_d + warp * p.done_slots;
  uint32_t* did = p.done_id + warp * p.done_slots;
  const uint32_t deg_at = record_degree_at(h.dim, h.type);
  gpu_full_warp w;
  for (uint64_t qi = warp; qi < p.nq; qi += warps) {
    for (uint32_t d = lane; d < h.dim; d += 32) q[d] = p.queries[qi * h.dim + d];
    __syncwarp();
    for (uint32_t e = lane; e < M * pq_centroids; e += 32)
      table[e] = table_entry(q, p.v.codebook, h.pq_sub_dim, e / pq_centroids, e % pq_centroids, h.distance);
    __syncwarp();
    uint32_t epoch = 0;
    if (lane == 0) epoch = ++p.epochs[warp];
    epoch = __shfl_sync(0xffffffffu, epoch, 0);
    const uint64_t tag = uint64_t(epoch) << 32;
    unsigned long long quantised = 0, bad = 0, fetches = 0, page_mates = 0;
    // The start: the entry node, or the nearest of it and the entry sample.
    float sd = std::numeric_limits<float>::infinity();
    uint32_t start = no_neighbour;
    for (uint32_t j = lane; j <= p.entry_sample; j += 32) {
      const uint32_t id = j == 0 ? uint32_t(h.entry) : entry_sample_node(h, p.entry_sample, j - 1);
      const float d = code_distance(table, p.v.codes + uint64_t(id) * M, M);
      ++quantised;
      if (before(d, id, sd, start)) sd = d, start = id;
    }
    for (unsigned off = 16; off; off >>= 1) {
      const float od = __shfl_xor_sync(0xffffffffu, sd, off);
      const uint32_t oi = __shfl_xor_sync(0xffffffffu, start, off);
      if (before(od, oi, sd, start)) sd = od, start = oi;
    }
    if (lane == 0) {
      ld[0] = sd;
      lid[0] = start;
      lx[0] = 0;
      see(seen, p.seen_slots, tag, start);
    }
    __syncwarp();
    uint32_t size = 1, expansions = 0, ndone = 0, nfetched = 0;
    bool failed = false;
    // Where node `id`'s record is in hand this step (null: not in hand).
    auto in_hand = [&](uint32_t id) -> const uint8_t* {
      const uint32_t key = p.whole_pages ? id / h.records_per_page : id;
      for (uint32_t f = 0; f < nfetched; ++f)
        if (fetched[f] == key)
          return hand + uint64_t(f) * p.fetch_stride + (p.whole_pages ? (id % h.records_per_page) * h.record_bytes : 0);
      return nullptr;
    };
    // Puts a record's neighbours not yet seen in the list. Whole warp.
    auto expand = [&](const uint8_t* rec) {
      uint32_t used = *reinterpret_cast<const uint32_t*>(rec + deg_at);
      if (used > h.degree) {
        if (lane == 0) ++bad;
        used = h.degree;
      }
      const uint32_t* nbr = reinterpret_cast<const uint32_t*>(rec + deg_at + 4);
      for (uint32_t jb = 0; jb < used; jb += 32) {
        const uint32_t jj = jb + lane;
        uint32_t y = jj < used ? nbr[jj] : 0;
        bool have = jj < used;
        if (have && y >= h.count) {
          ++bad;
          have = false;
        }
        const bool fresh = have && see(seen, p.seen_slots, tag, y);
        float d = 0;
        if (fresh) {
          d = code_distance(table, p.v.codes + uint64_t(y) * M, M);
          ++quantised;
        }
        list_insert_each(ld, lid, lx, size, p.list, fresh, d, y, lane);
      }
    };
    while (expansions < p.cap && !failed) {
      // The first `width` candidates not yet expanded, in list order.
      const uint32_t picked =
          take_unexpanded(lid, lx, size, min(p.width, p.cap - expansions), picks, lane, [](uint32_t) { return true; });
      if (picked == 0) break;
      expansions += picked;
      // Fetch them: each page once.
      if (lane == 0) {
        uint32_t n = 0;
        for (uint32_t j = 0; j < picked; ++j) {
          const uint32_t key = p.whole_pages ? picks[j] / h.records_per_page : picks[j];
          bool have = false;
          for (uint32_t f = 0; f < n; ++f) have = have || fetched[f] == key;
          if (!have) fetched[n] = key, fetched_for[n++] = picks[j];
        }
        nfetched = n;
      }
      nfetched = __shfl_sync(0xffffffffu, nfetched, 0);
      __syncwarp();
      const auto fetch_at = [&](uint32_t f) {
        return p.whole_pages ? uint64_t(fetched[f]) * h.page_bytes : record_offset(h, fetched[f]);
      };
      const auto fetch_records = [&](uint32_t f) {
        if (!p.whole_pages) return 1u;
        const uint64_t left = h.count - uint64_t(fetched[f]) * h.records_per_page;
        return left < h.records_per_page ? uint32_t(left) : h.records_per_page;
      };
      if (lane < nfetched) p.v.records.prefetch(fetch_at(lane));
      for (uint32_t f = 0; f < nfetched; ++f) {
        const request_status s = p.v.records.read_range(w, hand + uint64_t(f) * p.fetch_stride, fetch_at(f),
                                                        uint64_t(fetch_records(f)) * h.record_bytes);
        if (!s.ok()) {
          if (lane == 0) atomicCAS(p.failed_node, no_neighbour, fetched_for[f]);
          failed = true;
          break;
        }
      }
      if (failed) break;
      __syncwarp();
      fetches += nfetched;
      // Every record in hand (never in hand before): its exact distance, and
      // the list if it belongs there. Those not yet seen join it if nearer
      // the query than the record picked in their page.
      for (uint32_t f = 0; f < nfetched; ++f) {
        const uint32_t n = fetch_records(f);
        const uint32_t first = p.whole_pages ? fetched[f] * h.records_per_page : fetched[f];
        const uint8_t* page = hand + uint64_t(f) * p.fetch_stride;
        const uint32_t done_at = ndone;
        for (uint32_t r = 0; r < n; ++r) {
          const float exact = warp_exact_distance(q, page + uint64_t(r) * h.record_bytes, h.dim, h.type, h.distance, lane);
          if (lane == 0) dd[ndone] = exact, did[ndone] = first + r;
          ++ndone;
        }
        __syncwarp();
        const float picked_d = dd[done_at + (fetched_for[f] - first)];
        for (uint32_t sb = 0; sb < n; sb += 32) {
          const uint32_t slot = sb + lane, id = first + slot;
          const bool new_seen = slot < n && see(seen, p.seen_slots, tag, id);
          const bool joins = new_seen && (p.all_mates || dd[done_at + slot] <= picked_d);
          float qd = 0;
          if (joins) {
            qd = code_distance(table, p.v.codes + uint64_t(id) * M, M);
            ++quantised;
          }
          list_insert_each(ld, lid, lx, size, p.list, joins, qd, id, lane);
        }
      }
      // The records in hand the list holds unexpanded, in list order to the cap: expanded with the picks.
      uint32_t nmates = 0;
      if (p.whole_pages) {
        nmates = take_unexpanded(lid, lx, size, p.cap - expansions, mates, lane,
                                 [&](uint32_t id) { return in_hand(id) != nullptr; });
        page_mates += nmates;
        expansions += nmates;
      }
      for (uint32_t j = 0; j < picked; ++j) expand(in_hand(picks[j]));
      for (uint32_t j = 0; j < nmates; ++j) expand(in_hand(mates[j]));
      __syncwarp();  // every lane is done with the records in hand before the next fetch overwrites them
    }
    // The k nodes with exact distances nearest the query.
    __syncwarp();
    for (uint32_t j = 0; j < p.k; ++j) {
      float bd = std::numeric_limits<float>::infinity();
      uint32_t bi = no_neighbour, at = ~0u;
      if (!failed)
        for (uint32_t i = lane; i < ndone; i += 32)
          if (did[i] != no_neighbour && before(dd[i], did[i], bd, bi)) bd = dd[i], bi = did[i], at = i;
      for (unsigned off = 16; off; off >>= 1) {
        const float od = __shfl_xor_sync(0xffffffffu, bd, off);
        const uint32_t oi = __shfl_xor_sync(0xffffffffu, bi, off), oa = __shfl_xor_sync(0xffffffffu, at, off);
        if (before(od, oi, bd, bi)) bd = od, bi = oi, at = oa;
      }
      if (lane == 0) {
        p.ids[qi * p.k + j] = bi == no_neighbour ? bi : p.v.labels[bi];
        p.distances[qi * p.k + j] = bi == no_neighbour ? std::numeric_limits<float>::infinity() : bd;
        if (at != ~0u) did[at] = no_neighbour;
      }
      __syncwarp();
    }
    for (unsigned off = 16; off; off >>= 1) {
      quantised += __shfl_xor_sync(0xffffffffu, quantised, off);
      bad += __shfl_xor_sync(0xffffffffu, bad, off);
    }
    if (lane == 0) {
      atomicAdd(&p.counts[0], (unsigned long long)expansions);
      atomicAdd(&p.counts[1], quantised);
      atomicAdd(&p.counts[2], bad);
      atomicAdd(&p.counts[3], fetches);
      atomicAdd(&p.counts[4], page_mates);
    }
  }
}

}  // namespace

struct gpu_search::state {
  const vector_index* index = nullptr;
  device_buffer<float> codebook;
  device_buffer<uint8_t> codes;
  device_buffer<uint32_t> labels;
  device_buffer<uint64_t> seen;
  device_buffer<uint32_t> epochs;
  device_buffer<uint8_t> hand;
  device_buffer<uint32_t> mates;
  device_buffer<float> done_d;
  device_buffer<uint32_t> done_id;
  device_buffer<unsigned long long> counts;
  device_buffer<uint32_t> failed;
  uint64_t warps = 0, hand_bytes = 0, mates_count = 0;
  uint32_t seen_slots = 0, done_slots = 0;
};

gpu_search::gpu_search(const vector_index& index) : s_(std::make_unique<state>()) {
  s_->index = &index;
  s_->codebook.reset(index.codebook().size());
  check_cuda(cudaMemcpy(s_->codebook.p, index.codebook().data(), index.codebook().size() * 4, cudaMemcpyHostToDevice),
             "cudaMemcpy (codebook)");
  s_->codes.reset(index.codes().size());
  check_cuda(cudaMemcpy(s_->codes.p, index.codes().data(), index.codes().size(), cudaMemcpyHostToDevice),
             "cudaMemcpy (codes)");
  s_->labels.reset(index.labels().size());
  check_cuda(cudaMemcpy(s_->labels.p, index.labels().data(), index.labels().size() * 4, cudaMemcpyHostToDevice),
             "cudaMemcpy (labels)");
  s_->counts.reset(5);
  s_->failed.reset(1);
}

gpu_search::~gpu_search() = default;

uint64_t gpu_search::warps() const { return s_->warps; }

search_counts gpu_search::search(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                                 float* distances) {
  const index_header& h = s_->index->header();
  check_search_options(h, o);
  if (nq == 0) return {};
  if (!queries || !ids || !distances) throw error("vector search: a null pointer among the queries and results");
  check_finite_rows(queries, nq, h.dim, "vector search");
  device_buffer<float> q, d;
  device_buffer<uint32_t> r;
  q.reset(nq * h.dim);
  r.reset(nq * o.k);
  d.reset(nq * o.k);
  check_cuda(cudaMemcpy(q.p, queries, nq * h.dim * 4, cudaMemcpyHostToDevice), "cudaMemcpy (queries)");
  const search_counts c = search_device(q.p, nq, o, r.p, d.p);
  check_cuda(cudaMemcpy(ids, r.p, nq * o.k * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (ids)");
  check_cuda(cudaMemcpy(distances, d.p, nq * o.k * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (distances)");
  s_->index->check_whole();
  return c;
}

search_counts gpu_search::search_device(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                                        float* distances) {
  const vector_index& index = *s_->index;
  const index_header& h = index.header();
  check_search_options(h, o);
  if (nq == 0) return {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_device_pointer(queries, device, "the queries", "the vector index");
  check_device_pointer(ids, device, "the ids", "the vector index");
  check_device_pointer(distances, device, "the distances", "the vector index");
  const uint32_t cap = search_cap(o), per_fetch = records_a_fetch(h, o);
  const uint32_t slots = search_seen_slots(h, o);
  const uint32_t done_slots = cap * per_fetch;
  const uint32_t fetch_stride = o.whole_pages ? (h.page_bytes + 15) & ~15u : (h.record_bytes + 15) & ~15u;

  const uint32_t warp_smem =
      (4 * (h.pq_subspaces * pq_centroids + h.dim + o.list) + 4 * o.list + 3 * 4 * 32 + o.list + 15) & ~15u;
  int max_smem = 0;
  check_cuda(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  if (warp_smem > uint32_t(max_smem))
    throw error("vector search: a query needs " + std::to_string(warp_smem) + " bytes of shared memory (the device has " +
                std::to_string(max_smem) + "): fewer quantiser subspaces or a shorter list");
  const uint32_t per_block = std::clamp<uint32_t>(uint32_t(max_smem) / 2 / warp_smem, 1, 8);
  const size_t smem = size_t(per_block) * warp_smem;
  check_cuda(cudaFuncSetAttribute(beam_search, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
             "cudaFuncSetAttribute");
  int sms = 0, per_sm = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, beam_search, int(per_block * 32), smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  uint64_t blocks = uint64_t(std::max(per_sm, 1)) * uint64_t(sms);
  blocks = std::min<uint64_t>(blocks, (nq + per_block - 1) / per_block);
  // The cache must hold the pages every resident warp may pin at once:
  // fewer warps where it is small. A warp reads one record at a time, and
  // a record lies in one of the cache's pages when they are at least the
  // index's: one pin a warp (two, to leave its prefetches room).
  const uint32_t pins = index.cache().page_size() >= h.page_bytes ? 2 : pages_per_warp;
  const uint64_t fit = index.cache().slots() / pins;
  blocks = std::max<uint64_t>(1, std::min<uint64_t>(blocks, fit / per_block));
  // A warp's scratch in device memory grows with the list and the cap (about
  // 5 MB a warp at list 1024, mostly its seen set): at most half the free
  // memory, beside what this search holds already, goes to it; fewer warps
  // on a small or busy GPU.
  const uint64_t hand_bytes = uint64_t(o.width) * fetch_stride, mates_count = uint64_t(o.width) * per_fetch;
  const uint64_t per_warp = uint64_t(slots) * 8 + 4 + hand_bytes + mates_count * 4 + uint64_t(done_slots) * 8;
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const uint64_t held = s_->seen.bytes() + s_->epochs.bytes() + s_->hand.bytes() + s_->mates.bytes() +
                        s_->done_d.bytes() + s_->done_id.bytes();
  blocks = std::max<uint64_t>(1, std::min<uint64_t>(blocks, (free_bytes / 2 + held) / per_warp / per_block));
  const uint64_t resident = resident_warps(beam_search, blocks, int(per_block * 32), smem);
  if (resident * pins > index.cache().slots())
    throw error("vector search: a page cache of " + std::to_string(index.cache().slots()) + " pages is too small for " +
                std::to_string(resident) + " warps holding " + std::to_string(pins) + " pages each");
  const uint64_t warps = blocks * per_block;
  if (warps > s_->warps || slots != s_->seen_slots || done_slots > s_->done_slots || hand_bytes > s_->hand_bytes ||
      mates_count > s_->mates_count) {
    const uint64_t n = std::max(warps, s_->warps);
    s_->seen.reset(n * slots);
    s_->seen.zero();
    s_->epochs.reset(n);
    s_->epochs.zero();
    s_->warps = n;
    s_->seen_slots = slots;
    s_->done_slots = std::max(done_slots, s_->done_slots);
    s_->hand_bytes = std::max(hand_bytes, s_->hand_bytes);
    s_->mates_count = std::max(mates_count, s_->mates_count);
    s_->hand.reset(n * s_->hand_bytes);
    s_->mates.reset(n * s_->mates_count);
    s_->done_d.reset(n * s_->done_slots);
    s_->done_id.reset(n * s_->done_slots);
  }
  const uint32_t none = no_neighbour;
  check_cuda(cudaMemcpy(s_->failed.p, &none, 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  s_->counts.zero();

  kernel_params p{};
  p.v = index.host_view();
  p.v.codebook = s_->codebook.p;
  p.v.codes = s_->codes.p;
  p.v.labels = s_->labels.p;
  p.queries = queries;
  p.nq = nq;
  p.k = o.k;
  p.list = o.list;
  p.width = o.width;
  p.cap = cap;
  p.whole_pages = o.whole_pages;
  p.all_mates = o.all_mates;
  p.entry_sample = entry_sample_size(h, o);
  p.ids = ids;
  p.distances = distances;
  p.counts = s_->counts.p;
  p.seen = s_->seen.p;
  p.seen_slots = slots;
  p.epochs = s_->epochs.p;
  p.hand = s_->hand.p;
  p.hand_per_warp = s_->hand_bytes;
  p.fetch_stride = fetch_stride;
  p.mates = s_->mates.p;
  p.mates_per_warp = s_->mates_count;
  p.done_d = s_->done_d.p;
  p.done_id = s_->done_id.p;
  p.done_slots = s_->done_slots;
  p.failed_node = s_->failed.p;
  p.warp_smem = warp_smem;
  beam_search<<<unsigned(blocks), per_block * 32, smem>>>(p);
  check_cuda(cudaGetLastError(), "vector search launch");
  check_cuda(cudaDeviceSynchronize(), "vector search");
  unsigned long long counts[5];
  uint32_t failed = 0;
  check_cuda(cudaMemcpy(counts, s_->counts.p, sizeof counts, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_cuda(cudaMemcpy(&failed, s_->failed.p, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (failed != no_neighbour)
    throw data_error("vector search: the record of node " + std::to_string(index.labels()[failed]) +
                     " could not be read: " + describe(index.cache().last_error()));
  return search_counts{counts[0], counts[1], counts[2], counts[3], counts[4]};
}

}  // namespace deepwell::vectors
