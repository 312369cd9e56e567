// A user's program includes only the umbrella headers at the top of
// include/deepwell/ and has what it needs: this file includes nothing else
// of the library's (scripts/check-layers keeps other headers off the top).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "deepwell/deepwell.hpp"
#include "deepwell/durable.hpp"
#include "deepwell/files.hpp"
#include "deepwell/graph.hpp"
#include "deepwell/table.hpp"

namespace {

TEST(UmbrellaHeaders, DeepwellHppIsEnoughToReadAFileThroughTheCache) {
  const std::string path = "/tmp/deepwell-umbrella-" + std::to_string(getpid()) + ".bin";
  std::vector<uint64_t> values(64 * 1024);  // 512 KiB: 128 pages of 4 KiB
  for (uint64_t i = 0; i < values.size(); ++i) values[i] = i * 2654435761u;
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(values.data(), 8, values.size(), f), values.size());
  std::fclose(f);
  {
    deepwell::controller ctl;
    const uint32_t ns = ctl.add_namespace({deepwell::open_file_target(path), 4096, true});
    deepwell::cache_config cc;
    cc.page_size = 4096;
    cc.capacity_bytes = 16 * 4096;  // an eighth of the file: reads evict
    auto cache = deepwell::make_host_page_cache(ctl, cc);
    deepwell::array<uint64_t> a(cache, ns);
    ASSERT_EQ(a.size(), values.size());
    const auto ref = a.ref();
    for (uint64_t k = 0; k < values.size(); k += 997) ASSERT_EQ(ref[k], values[k]) << "index " << k;
    EXPECT_TRUE(cache->last_error().ok());
  }
  std::remove(path.c_str());
}

// The services' umbrellas declare their entry points (each exercised by its
// own tests; here: that one include is enough to name them).
TEST(UmbrellaHeaders, TheServicesUmbrellasDeclareTheirEntryPoints) {
  EXPECT_TRUE((std::is_class_v<deepwell::file_system>));
  EXPECT_TRUE((std::is_class_v<deepwell::durable::kv_store>));
  EXPECT_TRUE((std::is_class_v<deepwell::durable::write_ahead_log>));
  EXPECT_TRUE((std::is_class_v<deepwell::checkpoint_store>));
  EXPECT_TRUE((std::is_class_v<deepwell::graph::csr_file>));
  EXPECT_TRUE((std::is_class_v<deepwell::table::column_file>));
}

}  // namespace
