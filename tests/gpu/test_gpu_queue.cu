// GPU threads as clients of the controller, through the same queue_ref code
// the CPU tests run: random verified reads with up to a million threads,
// writes, errors reaching threads as statuses, deadlines, and a controller
// stopped under a running kernel (threads end with a status, never hang).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/gpu_client.hpp"

using namespace deepwell;
namespace sc = deepwell::nvme::sc;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

std::shared_ptr<target> pattern_memory(uint64_t bytes, uint64_t seed = 0) { return test::pattern_memory(bytes, true, seed); }

struct results {
  unsigned long long ok, nvme_errors, client_errors, mismatches;
  unsigned int last_status;
};

// Each thread: `per_thread` reads of one random block on queue (warp % nq),
// every word checked against the pattern.
__global__ void random_reads(const queue_ref* qs, unsigned nq, uint32_t nsid, uint64_t blocks, uint32_t block_bytes,
                             unsigned per_thread, uint64_t seed, uint64_t timeout_ns, results* out) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const queue_ref q = qs[(tid / 32) % nq];
  uint64_t x = tid * 0x9E3779B97F4A7C15ull + 1;
  for (unsigned i = 0; i < per_thread; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint64_t lba = x % blocks;
    const uint64_t deadline = now_ns() + timeout_ns;
    uint16_t cid;
    request_status s = q.acquire_cid(cid, deadline);
    if (!s.ok()) {
      atomicAdd(&out->client_errors, 1ull);
      out->last_status = s.pack();
      if (s.code == client_code::controller_lost) return;
      continue;
    }
    q.submit(cid, nvme::make_read(nsid, lba, 1, q.buffer_offset(cid)));
    wait_result r = q.wait(cid, deadline);
    if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
      atomicAdd(&out->client_errors, 1ull);
      out->last_status = r.status.pack();
      if (r.status.code == client_code::controller_lost) return;
      continue;  // the id is abandoned, not released
    }
    if (!r.status.ok()) {
      atomicAdd(&out->nvme_errors, 1ull);
      out->last_status = r.status.pack();
      if (r.status.nvme == sc::aborted_sq_deleted) {  // stopping: leave
        q.release_cid(cid);
        return;
      }
    } else {
      const uint64_t* d = reinterpret_cast<const uint64_t*>(q.buffer(cid));
      unsigned bad = 0;
      for (uint32_t w = 0; w < block_bytes / 8; ++w)
        bad += d[w] != test::pattern_word(lba * block_bytes + w * 8, seed);
      if (bad) atomicAdd(&out->mismatches, 1ull);
      else atomicAdd(&out->ok, 1ull);
    }
    q.release_cid(cid);
  }
}

// Each thread writes block `tid` with a pattern of seed `seed`.
__global__ void write_blocks(const queue_ref* qs, unsigned nq, uint32_t nsid, uint64_t nblocks, uint32_t block_bytes,
                             uint64_t seed, results* out) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= nblocks) return;
  const queue_ref q = qs[(tid / 32) % nq];
  const uint64_t deadline = now_ns() + 20'000'000'000ull;
  uint16_t cid;
  if (!q.acquire_cid(cid, deadline).ok()) {
    atomicAdd(&out->client_errors, 1ull);
    return;
  }
  uint64_t* d = reinterpret_cast<uint64_t*>(q.buffer(cid));
  for (uint32_t w = 0; w < block_bytes / 8; ++w) d[w] = test::pattern_word(tid * block_bytes + w * 8, seed);
  q.submit(cid, nvme::make_write(nsid, tid, 1, q.buffer_offset(cid)));
  wait_result r = q.wait(cid, deadline);
  if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
    atomicAdd(&out->client_errors, 1ull);
    return;
  }
  atomicAdd(r.status.ok() ? &out->ok : &out->nvme_errors, 1ull);
  q.release_cid(cid);
}

struct gpu_setup {
  std::vector<std::unique_ptr<gpu_queue_client>> clients;
  queue_ref* d_refs = nullptr;
  results* d_out = nullptr;
  gpu_setup(controller& ctl, unsigned nq, qp_geometry g) {
    std::vector<queue_ref> refs;
    for (unsigned i = 0; i < nq; ++i) {
      clients.push_back(std::make_unique<gpu_queue_client>(ctl.create_queue_pair(g)));
      refs.push_back(clients.back()->ref());
    }
    check_cuda(cudaMalloc(&d_refs, sizeof(queue_ref) * nq), "cudaMalloc");
    check_cuda(cudaMemcpy(d_refs, refs.data(), sizeof(queue_ref) * nq, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMalloc(&d_out, sizeof(results)), "cudaMalloc");
    check_cuda(cudaMemset(d_out, 0, sizeof(results)), "cudaMemset");
  }
  results get() {
    results r{};
    check_cuda(cudaMemcpy(&r, d_out, sizeof(r), cudaMemcpyDeviceToHost), "cudaMemcpy results");
    return r;
  }
  ~gpu_setup() {
    cudaFree(d_refs);
    cudaFree(d_out);
  }
};

}  // namespace

TEST(GpuQueue, MillionThreadsRandomVerifiedReads) {
  controller_config cc;
  cc.pollers = 4;
  controller ctl(cc);
  const uint64_t bytes = 256ull << 20;
  const uint32_t ns = ctl.add_namespace({pattern_memory(bytes, 3), 512, true});
  gpu_setup s(ctl, 32, {1024, 1024, 4096});
  const unsigned threads = 1u << 20;
  random_reads<<<threads / 256, 256>>>(s.d_refs, 32, ns, bytes / 512, 512, 1, 3, 60'000'000'000ull, s.d_out);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  results r = s.get();
  EXPECT_EQ(r.ok, threads);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.nvme_errors, 0u);
  EXPECT_EQ(r.client_errors, 0u) << "status " << std::hex << r.last_status;
}

TEST(GpuQueue, StagingReuseOrderingStress) {
  // Few queues, shallow: every staging buffer is reused thousands of times;
  // a stale or early read of one shows up as a pattern mismatch.
  controller ctl;
  const uint64_t bytes = 64ull << 20;
  const uint32_t ns = ctl.add_namespace({pattern_memory(bytes, 11), 4096, true});
  gpu_setup s(ctl, 2, {16, 16, 4096});
  random_reads<<<64, 256>>>(s.d_refs, 2, ns, bytes / 4096, 4096, 16, 11, 60'000'000'000ull, s.d_out);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  results r = s.get();
  EXPECT_EQ(r.ok, 64u * 256 * 16);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.client_errors + r.nvme_errors, 0u);
}

TEST(GpuQueue, WritesFromTheGpuLandByteForByte) {
  controller ctl;
  const uint64_t nblocks = 1 << 14;
  auto mem = make_host_memory_target(nblocks * 4096, true);
  const uint32_t ns = ctl.add_namespace({mem, 4096, false});
  gpu_setup s(ctl, 8, {256, 256, 4096});
  write_blocks<<<nblocks / 128, 128>>>(s.d_refs, 8, ns, nblocks, 4096, 5, s.d_out);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  results r = s.get();
  EXPECT_EQ(r.ok, nblocks);
  const auto* p = static_cast<const uint64_t*>(mem->host_pointer());
  uint64_t bad = 0;
  for (uint64_t i = 0; i < nblocks * 4096 / 8; ++i) bad += p[i] != test::pattern_word(i * 8, 5);
  EXPECT_EQ(bad, 0u);
}

TEST(GpuQueue, ErrorsReachTheThreadsAsStatuses) {
  controller ctl;
  const uint64_t bytes = 16ull << 20;
  auto faulty = make_fault_target(pattern_memory(bytes, 2));
  fault_rule rule;
  rule.kind = fault_rule::fail_read;
  rule.offset = 0;
  rule.length = bytes / 2;  // half the blocks fail
  faulty->add_rule(rule);
  const uint32_t ns = ctl.add_namespace({faulty, 4096, true});
  gpu_setup s(ctl, 4, {128, 128, 4096});
  random_reads<<<64, 128>>>(s.d_refs, 4, ns, bytes / 4096, 4096, 4, 2, 30'000'000'000ull, s.d_out);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  results r = s.get();
  EXPECT_EQ(r.ok + r.nvme_errors, 64u * 128 * 4);
  EXPECT_GT(r.nvme_errors, 64u * 128 * 4 / 4);
  EXPECT_GT(r.ok, 64u * 128 * 4 / 4);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_TRUE(request_status::unpack(r.last_status).nvme == sc::unrecovered_read_error);
}

TEST(GpuQueue, DeadlinesFireInsteadOfHanging) {
  controller ctl;
  auto slow = make_fault_target(pattern_memory(1 << 20));
  fault_rule rule;
  rule.kind = fault_rule::delay;
  rule.delay_ns = 3'000'000'000ull;
  slow->add_rule(rule);
  const uint32_t ns = ctl.add_namespace({slow, 4096, true});
  gpu_setup s(ctl, 1, {64, 64, 4096});
  const auto t0 = std::chrono::steady_clock::now();
  random_reads<<<1, 32>>>(s.d_refs, 1, ns, 256, 4096, 1, 0, 100'000'000ull, s.d_out);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  results r = s.get();
  EXPECT_EQ(r.client_errors, 32u);
  EXPECT_EQ(request_status::unpack(r.last_status).code, client_code::timeout);
  EXPECT_LT(secs, 2.0);
}

TEST(GpuQueue, ControllerStoppedUnderARunningKernel) {
  auto ctl = std::make_unique<controller>();
  const uint32_t ns = ctl->add_namespace({pattern_memory(64ull << 20), 4096, true});
  gpu_setup s(*ctl, 4, {256, 256, 4096});
  // Enough work for several seconds; the stop comes after 200 ms.
  random_reads<<<128, 256>>>(s.d_refs, 4, ns, (64ull << 20) / 4096, 4096, 100000, 0, 30'000'000'000ull, s.d_out);
  CUDA_OK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  ctl->stop();  // the controller makes no CUDA call: no deadlock with the kernel
  CUDA_OK(cudaDeviceSynchronize());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  results r = s.get();
  EXPECT_GT(r.ok, 0u);
  EXPECT_GT(r.client_errors + r.nvme_errors, 0u);  // aborted or controller lost
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_LT(secs, 20.0);
}
