// The README's example: gather rows of a file far larger than the cache
// into GPU memory, by random indices, through array_ref. Writes its own data
// file (float i at index i), checks every gathered value, prints the cache's
// statistics.   examples/gather [path] [million floats] [rounds]
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <vector>

#include "deepwell/cache/gpu_launch.hpp"  // launch checks: CUDA code only
#include "deepwell/deepwell.hpp"

__global__ void gather(deepwell::array_ref<float> feats, const uint64_t* idx, float* out, uint64_t n) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = feats[idx[i]];  // an HBM hit, or a fetch from storage
}

int main(int argc, char** argv) try {
  // With DEEPWELL_SERVER set (docs/server.md), the data is a dataset that
  // `deepwell serve` offers (argv[1]: its name, default "features", made by
  // scripts/demo-data): this program gets queue pairs from the server
  // instead of running a controller of its own. Otherwise it writes a file
  // and serves it itself.
  const std::string server = deepwell::server_from_env();
  const std::string path = argc > 1 ? argv[1] : server.empty() ? "/var/tmp/deepwell-gather.bin" : "features";
  const uint64_t count = (argc > 2 ? std::stoull(argv[2]) : 256) << 20;  // floats in the file
  std::shared_ptr<deepwell::controller_link> link;
  uint32_t ns = 0;
  std::shared_ptr<deepwell::controller> ctl;
  if (!server.empty()) {
    auto s = deepwell::server_link::connect(server, "gather");
    ns = s->lookup(path);
    link = s;
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw deepwell::error("cannot create " + path);
    std::vector<float> chunk(1 << 20);
    for (uint64_t i = 0; i < count; i += chunk.size()) {
      for (size_t k = 0; k < chunk.size(); ++k) chunk[k] = float((i + k) % 16777216);
      std::fwrite(chunk.data(), sizeof(float), chunk.size(), f);
    }
    std::fclose(f);
    ctl = std::make_shared<deepwell::controller>();
    ns = ctl->add_namespace({deepwell::open_file_target(path), 4096, true});
    link = deepwell::in_process_link(ctl);
  }
  auto cache = deepwell::make_gpu_page_cache(link, {.page_size = 4096, .capacity_bytes = 256ull << 20});
  deepwell::array<float> feats(cache, ns);

  const uint64_t n = 1 << 22, blocks = (n + 255) / 256;
  // argv[3]: rounds of n random reads (default 1), each checked: many
  // rounds make a stress test of reads under eviction.
  const uint64_t rounds = argc > 3 ? std::stoull(argv[3]) : 1;
  std::vector<uint64_t> idx(n);
  std::vector<float> out(n);
  std::mt19937_64 rng(1);
  uint64_t* d_idx;
  float* d_out;
  deepwell::check_cuda(cudaMalloc(&d_idx, n * 8), "cudaMalloc");
  deepwell::check_cuda(cudaMalloc(&d_out, n * 4), "cudaMalloc");
  deepwell::check_launch(*cache, gather, blocks, 256);
  uint64_t wrong = 0;
  for (uint64_t r = 0; r < rounds; ++r) {
    for (auto& i : idx) i = rng() % feats.size();
    cudaMemcpy(d_idx, idx.data(), n * 8, cudaMemcpyHostToDevice);
    gather<<<blocks, 256>>>(feats.ref(), d_idx, d_out, n);
    deepwell::check_cuda(cudaDeviceSynchronize(), "gather kernel");
    if (auto e = cache->last_error(); !e.ok()) throw deepwell::error("gather: " + deepwell::describe(e));
    cudaMemcpy(out.data(), d_out, n * 4, cudaMemcpyDeviceToHost);
    for (uint64_t i = 0; i < n; ++i) {
      if (out[i] == float(idx[i] % 16777216)) continue;
      // The first few in full: what was read says where it came from (float
      // k is element k mod 2^24: another offset of the same page, or another page).
      if (++wrong <= 8)
        std::fprintf(stderr, "wrong: round %llu, out[%llu] (element %llu, page %llu, offset %llu) = %.1f, want %.1f\n",
                     (unsigned long long)r, (unsigned long long)i, (unsigned long long)idx[i],
                     (unsigned long long)(idx[i] / 1024), (unsigned long long)(idx[i] % 1024), out[i],
                     float(idx[i] % 16777216));
    }
  }
  const deepwell::cache_stats s = cache->stats();
  std::printf("gathered %llu floats from a %.1f GiB dataset through a 256 MiB cache: %llu wrong; "
              "hits %llu, misses %llu (hit rate %.3f), evictions %llu\n",
              (unsigned long long)(n * rounds), feats.size() * 4.0 / (1 << 30), (unsigned long long)wrong,
              (unsigned long long)s.hits, (unsigned long long)s.misses, s.hit_rate(), (unsigned long long)s.evictions);
  cudaFree(d_idx);
  cudaFree(d_out);
  if (server.empty()) unlink(path.c_str());
  return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gather: %s\n", e.what());
  return 2;
}
