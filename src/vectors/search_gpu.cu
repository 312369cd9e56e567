// The beam search kernel: search_cpu's semantics, a warp a query.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/vectors/distance.hpp"
#include "deepwell/vectors/gpu_search.hpp"
#include "vectors/warp_lists.cuh"

namespace deepwell::vectors {

namespace {

struct kernel_params {
  index_view v;
  const float* queries;
  uint64_t nq;
  uint32_t k, list, width, cap;
  uint32_t* ids;
  float* distances;
  unsigned long long* counts;  // expansions, distances, bad ids
  uint64_t* seen;              // seen_slots a warp
  uint32_t seen_slots;         // a power of two > 2 x the most ids a query can see
  uint32_t* epochs;            // a warp's queries so far (tags its seen entries)
  uint8_t* records;            // a record a warp
  uint32_t record_stride;
  float* done_d;               // cap a warp: the expanded nodes' exact distances
  uint32_t* done_id;
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
  uint8_t* lx = reinterpret_cast<uint8_t*>(picks + 32);
  uint64_t* seen = p.seen + warp * p.seen_slots;
  uint8_t* rec = p.records + warp * p.record_stride;
  float* dd = p.done_d + warp * p.cap;
  uint32_t* did = p.done_id + warp * p.cap;
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
    unsigned long long quantised = 0, bad = 0;
    const uint32_t start = uint32_t(h.entry);
    if (lane == 0) {
      ld[0] = code_distance(table, p.v.codes + uint64_t(start) * M, M);
      lid[0] = start;
      lx[0] = 0;
      see(seen, p.seen_slots, tag, start);
      quantised = 1;
    }
    __syncwarp();
    uint32_t size = 1, expansions = 0, ndone = 0;
    bool failed = false;
    while (expansions < p.cap && !failed) {
      // The first `width` candidates not yet expanded, in list order.
      uint32_t picked = 0;
      for (uint32_t base = 0; base < size && picked < p.width && expansions + picked < p.cap; base += 32) {
        const uint32_t i = base + lane;
        const bool open = i < size && !lx[i];
        const unsigned b = __ballot_sync(0xffffffffu, open);
        const uint32_t room = min(p.width - picked, p.cap - expansions - picked);
        const uint32_t rank = __popc(b & ((1u << lane) - 1));
        if (open && rank < room) {
          lx[i] = 1;
          picks[picked + rank] = lid[i];
        }
        picked += min(uint32_t(__popc(b)), room);
      }
      __syncwarp();
      if (picked == 0) break;
      if (lane < picked) p.v.records.prefetch(record_offset(h, picks[lane]));
      for (uint32_t j = 0; j < picked; ++j) {
        const uint32_t node = picks[j];
        const request_status s = p.v.records.read_range(w, rec, record_offset(h, node), h.record_bytes);
        if (!s.ok()) {
          if (lane == 0) atomicCAS(p.failed_node, no_neighbour, node);
          failed = true;
          break;
        }
        __syncwarp();
        const float exact = warp_exact_distance(q, rec, h.dim, h.type, h.distance, lane);
        if (lane == 0) dd[ndone] = exact, did[ndone] = node;
        ++ndone;
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
          for (unsigned fm = __ballot_sync(0xffffffffu, fresh); fm; fm &= fm - 1) {
            const unsigned src = __ffs(fm) - 1;
            list_insert(ld, lid, lx, size, p.list, __shfl_sync(0xffffffffu, d, src),
                        __shfl_sync(0xffffffffu, y, src), lane);
          }
        }
        __syncwarp();  // every lane is done with the record before the next read overwrites it
      }
      expansions += picked;
    }
    // The k expanded nodes nearest by exact distance.
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
  device_buffer<uint8_t> records;
  device_buffer<float> done_d;
  device_buffer<uint32_t> done_id;
  device_buffer<unsigned long long> counts;
  device_buffer<uint32_t> failed;
  uint64_t warps = 0;
  uint32_t seen_slots = 0, cap = 0;
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
  s_->counts.reset(3);
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
  for (uint64_t i = 0; i < nq * h.dim; ++i)
    if (!std::isfinite(queries[i]))
      throw error("vector search: query " + std::to_string(i / h.dim) + " holds a NaN or an infinity");
  device_buffer<float> q, d;
  device_buffer<uint32_t> r;
  q.reset(nq * h.dim);
  r.reset(nq * o.k);
  d.reset(nq * o.k);
  check_cuda(cudaMemcpy(q.p, queries, nq * h.dim * 4, cudaMemcpyHostToDevice), "cudaMemcpy (queries)");
  const search_counts c = search_device(q.p, nq, o, r.p, d.p);
  check_cuda(cudaMemcpy(ids, r.p, nq * o.k * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (ids)");
  check_cuda(cudaMemcpy(distances, d.p, nq * o.k * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (distances)");
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
  const uint32_t cap = o.max_expansions ? o.max_expansions : 2 * o.list;
  uint32_t slots = 1024;
  while (slots < 2ull * (1ull + uint64_t(cap) * h.degree)) slots *= 2;

  const uint32_t warp_smem =
      (4 * (h.pq_subspaces * pq_centroids + h.dim + o.list) + 4 * o.list + 4 * 32 + o.list + 15) & ~15u;
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
  const uint64_t resident = resident_warps(beam_search, blocks, int(per_block * 32), smem);
  if (resident * pins > index.cache().slots())
    throw error("vector search: a page cache of " + std::to_string(index.cache().slots()) + " pages is too small for " +
                std::to_string(resident) + " warps holding " + std::to_string(pins) + " pages each");
  const uint64_t warps = blocks * per_block;
  const uint32_t stride = (h.record_bytes + 15) & ~15u;
  if (warps > s_->warps || slots != s_->seen_slots || cap > s_->cap) {
    s_->seen.reset(warps * slots);
    s_->seen.zero();
    s_->epochs.reset(warps);
    s_->epochs.zero();
    s_->records.reset(warps * stride);
    s_->done_d.reset(warps * cap);
    s_->done_id.reset(warps * cap);
    s_->warps = warps;
    s_->seen_slots = slots;
    s_->cap = cap;
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
  p.ids = ids;
  p.distances = distances;
  p.counts = s_->counts.p;
  p.seen = s_->seen.p;
  p.seen_slots = slots;
  p.epochs = s_->epochs.p;
  p.records = s_->records.p;
  p.record_stride = stride;
  p.done_d = s_->done_d.p;
  p.done_id = s_->done_id.p;
  p.failed_node = s_->failed.p;
  p.warp_smem = warp_smem;
  beam_search<<<unsigned(blocks), per_block * 32, smem>>>(p);
  check_cuda(cudaGetLastError(), "vector search launch");
  check_cuda(cudaDeviceSynchronize(), "vector search");
  unsigned long long counts[3];
  uint32_t failed = 0;
  check_cuda(cudaMemcpy(counts, s_->counts.p, sizeof counts, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check_cuda(cudaMemcpy(&failed, s_->failed.p, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (failed != no_neighbour)
    throw data_error("vector search: the record of node " + std::to_string(index.labels()[failed]) +
                     " could not be read: " + describe(index.cache().last_error()));
  return search_counts{counts[0], counts[1], counts[2]};
}

}  // namespace deepwell::vectors
