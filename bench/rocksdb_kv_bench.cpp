// The key-value benchmark's RocksDB baseline (bench/gpu_kv_bench.cu takes
// its number with --rocksdb-sets-per-s): batches of SETs of 8-byte keys and
// fixed-size values (the same keys and values as gpu_kv_bench makes) as
// RocksDB WriteBatches with a synced write-ahead log (WriteOptions::sync,
// so each batch is durable when Write returns, as the store's are). Prints
// one JSON object with the SETs per second. Built only where RocksDB is
// installed (Debian: apt-get install librocksdb-dev).
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepwell/common/detail/hash.hpp"

namespace {

// The keys and values gpu_kv_bench.cu makes.
uint64_t mix(uint64_t x) { return deepwell::detail::fmix64(x); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t value_bytes = 32;
  uint64_t batch = 1 << 16;
  uint32_t batches = 48, warmup = 4;
  uint64_t key_space = 160ull << 20;  // as gpu_kv_bench's default table (2 GiB, 32-byte values)
  std::string dir = "/var/tmp";
  std::string json_path;
  bool keep = false;
  CLI::App app{"RocksDB baseline: batches of SETs, WriteBatch with a synced WAL"};
  app.add_option("--value-bytes", value_bytes, "value size");
  app.add_option("--batch", batch, "SETs per batch");
  app.add_option("--batches", batches, "measured batches");
  app.add_option("--warmup", warmup, "batches before measuring");
  app.add_option("--key-space", key_space, "keys are random in [0, key-space)");
  app.add_option("--dir", dir, "where the database goes");
  app.add_option("--json", json_path, "also append the JSON object to this file");
  app.add_flag("--keep", keep, "keep the database");
  CLI11_PARSE(app, argc, argv);

  const std::string path = dir + "/deepwell-kv-bench.rocksdb";
  std::filesystem::remove_all(path);
  rocksdb::Options o;
  o.create_if_missing = true;
  o.IncreaseParallelism();
  o.OptimizeLevelStyleCompaction();
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, path, &db);
  if (!s.ok()) {
    std::cerr << "rocksdb open " << path << ": " << s.ToString() << "\n";
    return 1;
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;  // the WAL is fsynced before Write returns
  const uint32_t vw = value_bytes / 8;
  std::vector<uint64_t> value(vw);
  double t = 0;
  for (uint32_t b = 0; b < warmup + batches; ++b) {
    const double s0 = now_s();
    rocksdb::WriteBatch wb;
    for (uint64_t i = 0; i < batch; ++i) {
      const uint64_t k = mix(b * 0x9E3779B97F4A7C15ull + i + 1) % key_space;
      for (uint32_t j = 0; j < vw; ++j) value[j] = mix(k * 31 + j) ^ b;
      wb.Put(rocksdb::Slice(reinterpret_cast<const char*>(&k), 8),
             rocksdb::Slice(reinterpret_cast<const char*>(value.data()), value_bytes));
    }
    s = db->Write(wo, &wb);
    if (!s.ok()) {
      std::cerr << "rocksdb write: " << s.ToString() << "\n";
      return 1;
    }
    if (b >= warmup) t += now_s() - s0;
  }
  delete db;
  if (!keep) std::filesystem::remove_all(path);
  nlohmann::json out;
  out["bench"] = "rocksdb_kv";
  out["rocksdb_version"] = std::to_string(ROCKSDB_MAJOR) + "." + std::to_string(ROCKSDB_MINOR) + "." +
                           std::to_string(ROCKSDB_PATCH);
  out["value_bytes"] = value_bytes;
  out["batch"] = batch;
  out["batches"] = batches;
  out["sync_wal"] = true;
  out["rocksdb_sets_per_s"] = double(batch) * batches / t;
  const std::string line = out.dump();
  std::cout << line << std::endl;
  if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << line << "\n";
  return 0;
}
