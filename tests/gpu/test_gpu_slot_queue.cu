// The file API's free-slot queue (files/slot_queue.hpp) with GPU warps as
// callers: thousands of warps take and put back a few slots, with few cells
// so that waiters lap, some leaving at short deadlines; no slot is ever held
// by two warps at once, and every slot is there at the end.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>

#include "deepwell/files/client_memory.hpp"
#include "deepwell/files/slot_queue.hpp"

using namespace deepwell;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

struct never_answered {
  DW_HD bool operator()(uint32_t) const { return false; }
};

struct counts {
  unsigned long long taken, timed_out, overlaps, bad_slot;
};

// Lane 0 of each warp: `rounds` times take a slot, hold it a moment, put it
// back. With short_ns, warps of odd index wait at most that for a slot.
__global__ void take_and_put(slot_queue_ref q, uint32_t rounds, uint64_t short_ns, int* holders, counts* c) {
  if (threadIdx.x % 32) return;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  for (uint32_t r = 0; r < rounds; ++r) {
    const uint64_t wait = short_ns && (warp & 1) ? short_ns : 10'000'000'000ull;
    const slot_queue_ref::taken t = q.take(now_ns() + wait, never_answered{});
    if (!t.ok()) {
      atomicAdd(&c->timed_out, 1ull);
      continue;
    }
    if (t.slot >= q.nslots) {
      atomicAdd(&c->bad_slot, 1ull);
      continue;
    }
    if (atomicAdd(&holders[t.slot], 1) != 0) atomicAdd(&c->overlaps, 1ull);
    __nanosleep(200);
    atomicSub(&holders[t.slot], 1);
    atomicAdd(&c->taken, 1ull);
    q.put(t.slot, now_ns() + 10'000'000'000ull);
  }
}

// One thread: puts back any loose slot, then takes slots until none comes
// within a millisecond; got[s] counts each.
__global__ void drain(slot_queue_ref q, int* got, unsigned* n) {
  q.reclaim(now_ns() + 1'000'000'000ull, never_answered{});
  for (;;) {
    const slot_queue_ref::taken t = q.take(now_ns() + 1'000'000, never_answered{});
    if (!t.ok()) return;
    if (t.slot < q.nslots) ++got[t.slot];
    ++*n;
  }
}

void run_case(uint32_t nslots, uint32_t cell_shift, uint64_t short_ns) {
  auto mem = make_gpu_client_memory();
  const slot_queue_ref q = make_slot_queue(*mem, nslots, cell_shift);
  int* holders = nullptr;
  int* got = nullptr;
  counts* c = nullptr;
  unsigned* n = nullptr;
  CUDA_OK(cudaMallocManaged(&holders, sizeof(int) * nslots));
  CUDA_OK(cudaMallocManaged(&got, sizeof(int) * nslots));
  CUDA_OK(cudaMallocManaged(&c, sizeof(counts)));
  CUDA_OK(cudaMallocManaged(&n, sizeof(unsigned)));
  CUDA_OK(cudaMemset(holders, 0, sizeof(int) * nslots));
  CUDA_OK(cudaMemset(got, 0, sizeof(int) * nslots));
  CUDA_OK(cudaMemset(c, 0, sizeof(counts)));
  CUDA_OK(cudaMemset(n, 0, sizeof(unsigned)));
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const uint32_t blocks = uint32_t(sms) * 4, rounds = 50;  // 16 warps a block
  take_and_put<<<blocks, 512>>>(q, rounds, short_ns, holders, c);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  drain<<<1, 1>>>(q, got, n);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const unsigned long long warps = uint64_t(blocks) * 16;
  EXPECT_EQ(c->overlaps, 0u) << "a slot was held by two warps at once";
  EXPECT_EQ(c->bad_slot, 0u);
  EXPECT_EQ(c->taken + c->timed_out, warps * rounds);
  if (!short_ns) EXPECT_EQ(c->timed_out, 0u);
  EXPECT_GT(c->taken, warps * rounds / 2) << "the warps that wait long all get slots";
  EXPECT_EQ(*n, nslots) << "slots lost or duplicated";
  for (uint32_t s = 0; s < nslots; ++s) EXPECT_EQ(got[s], 1) << "slot " << s;
  cudaFree(holders);
  cudaFree(got);
  cudaFree(c);
  cudaFree(n);
}

TEST(GpuSlotQueue, WarpsNeverHoldASlotTogetherAndNoneIsLost) { run_case(256, 0, 0); }
TEST(GpuSlotQueue, WarpsLappingFewCellsAndLeavingAtDeadlinesLoseNoSlot) { run_case(8, 6, 20'000); }

}  // namespace
