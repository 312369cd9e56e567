// Settings (defaults.hpp): explicit > environment > built-in, the same in
// the C++ structs, the C ABI's options and the knob list; junk in the
// environment is refused with the variable's name.
#include <gtest/gtest.h>

#include <string>

#include "deepwell/c/deepwell.h"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/defaults.hpp"
#include "deepwell/controller/controller.hpp"
#include "env_guard.hpp"

using namespace deepwell;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Defaults, BuiltInWhenTheEnvironmentSaysNothing) {
  test::env_var_guard a("DEEPWELL_POLLERS"), b("DEEPWELL_PAGE_SIZE"), c("DEEPWELL_CACHE_BYTES"), d("DEEPWELL_TIMEOUT_MS");
  unsetenv("DEEPWELL_POLLERS");
  unsetenv("DEEPWELL_PAGE_SIZE");
  setenv("DEEPWELL_CACHE_BYTES", "", 1);  // empty: unset
  unsetenv("DEEPWELL_TIMEOUT_MS");
  EXPECT_EQ(controller_config{}.pollers, defaults::builtin::pollers());
  EXPECT_EQ(cache_config{}.page_size, defaults::builtin::page_size);
  EXPECT_EQ(cache_config{}.capacity_bytes, defaults::builtin::cache_bytes);
  EXPECT_EQ(cache_config{}.timeout_ns, defaults::builtin::timeout_ms * 1000000);
  dw_array_options o;
  dw_array_options_init(&o);
  EXPECT_EQ(o.cache.pollers, defaults::builtin::pollers()) << "C and C++ state one default";
  EXPECT_EQ(o.cache.page_size, defaults::builtin::page_size);
  EXPECT_EQ(o.cache.cache_bytes, defaults::builtin::cache_bytes);
  EXPECT_DOUBLE_EQ(o.cache.timeout_s, defaults::builtin::timeout_ms / 1000.0);
}

TEST(Defaults, TheEnvironmentBeatsTheBuiltInAndCodeBeatsBoth) {
  test::env_var_guard a("DEEPWELL_POLLERS", "3"), b("DEEPWELL_CACHE_BYTES", "64MiB"), c("DEEPWELL_DIRECT_FILES", "never"),
      d("DEEPWELL_POLLER_BATCH", "0"), e("DEEPWELL_IO", "threads");
  EXPECT_EQ(controller_config{}.pollers, 3u);
  EXPECT_EQ(controller_config{}.fetch_batch, 0u);
  EXPECT_EQ(controller_config{}.backend, io_backend::threads);
  EXPECT_EQ(cache_config{}.capacity_bytes, 64ull << 20);
  EXPECT_EQ(cache_config{}.direct_files, cache_config::file_tier::never);
  dw_array_options o;
  dw_array_options_init(&o);
  EXPECT_EQ(o.cache.pollers, 3u);
  EXPECT_EQ(o.cache.cache_bytes, 64ull << 20);
  EXPECT_EQ(o.cache.direct_files, 0);
  controller_config cc;
  cc.pollers = 1;  // explicit
  controller ctl(cc);
  EXPECT_EQ(ctl.backend_name(), "threads");
  bool listed = false;
  for (const defaults::knob& k : defaults::knobs())
    if (k.variable == "DEEPWELL_POLLERS") listed = k.value == "3" && k.builtin == std::to_string(defaults::builtin::pollers());
  EXPECT_TRUE(listed);
}

TEST(Defaults, JunkInTheEnvironmentIsRefusedWithItsName) {
  struct bad {
    const char* variable;
    const char* value;
    std::function<void()> use;
  };
  const bad cases[] = {
      {"DEEPWELL_POLLERS", "two", [] { controller_config c; }},
      {"DEEPWELL_POLLERS", "0", [] { controller_config c; }},
      {"DEEPWELL_POLLER_SPIN_US", "-5", [] { controller_config c; }},
      {"DEEPWELL_IO_DEPTH", "99999999999999999999999", [] { controller_config c; }},
      {"DEEPWELL_PAGE_SIZE", "4k?", [] { cache_config c; }},
      {"DEEPWELL_CACHE_BYTES", "1 gigabyte", [] { cache_config c; }},
      {"DEEPWELL_CACHE_BYTES", "12PB", [] { cache_config c; }},
      {"DEEPWELL_TIMEOUT_MS", "0", [] { cache_config c; }},
      {"DEEPWELL_DIRECT_FILES", "sometimes", [] { cache_config c; }},
      {"DEEPWELL_CLEAN_THRESHOLD", "1.5", [] { cache_config c; }},
      {"DEEPWELL_STAGING_STORES", "fast", [] { defaults::staging_stores(); }},
      {"DEEPWELL_IO", "bogus", [] { controller_config c; }},
  };
  for (const bad& b : cases) {
    test::env_var_guard g(b.variable, b.value);
    const std::string m = message_of(b.use);
    EXPECT_NE(m.find(std::string(b.variable) + "=" + b.value), std::string::npos) << m;
  }
  // The C ABI reports it from dw_array_open, with the name.
  test::env_var_guard g("DEEPWELL_PAGE_SIZE", "huge");
  dw_array_options o;
  dw_array_options_init(&o);
  o.host_bytes = 4096;
  o.row_bytes = 64;
  o.cache.device = -1;
  o.cache.page_size = 0;  // the default: the environment's, which is junk
  dw_array* a = nullptr;
  EXPECT_NE(dw_array_open(&o, &a), DW_OK);
  EXPECT_NE(std::string(dw_last_error()).find("DEEPWELL_PAGE_SIZE=huge"), std::string::npos) << dw_last_error();
  EXPECT_EQ(a, nullptr);
}

TEST(Defaults, ByteSizesTakeUnits) {
  test::env_var_guard g("DEEPWELL_CACHE_BYTES", "3GiB");
  EXPECT_EQ(defaults::cache_bytes(), 3ull << 30);
  setenv("DEEPWELL_CACHE_BYTES", "512K", 1);
  EXPECT_EQ(defaults::cache_bytes(), 512ull << 10);
  setenv("DEEPWELL_CACHE_BYTES", "1048576", 1);
  EXPECT_EQ(defaults::cache_bytes(), 1ull << 20);
}
