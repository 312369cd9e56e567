// The C ABI's options structures say their own size (deepwell.h): what a
// caller built against another deepwell.h passes is read as far as it goes,
// and a size the library cannot take, or set fields it does not know, are
// refused with a message that says so, never read past or ignored.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "deepwell/c/deepwell.h"

namespace {

// A caller's options as a newer deepwell.h would lay them out: this
// library's struct, then `more` bytes of fields it does not know.
template <class T>
struct newer {
  T known;
  unsigned char more[24];
};

std::string error_of(int rc) { return rc == DW_EINVAL ? std::string(dw_last_error()) : "rc " + std::to_string(rc); }

// first: the size of T's first layout (ABI 7's; smaller than sizeof(T)
// where fields were appended since).
template <class T, class Open>
void refuses_bad_sizes(void (*init)(T*), Open open, const char* name, size_t first = sizeof(T)) {
  T o;
  init(&o);
  EXPECT_EQ(o.size, sizeof(T)) << name;
  o.size = 0;
  EXPECT_NE(error_of(open(&o)).find(std::string(name) + ".size is 0"), std::string::npos) << dw_last_error();
  for (uint32_t bad : {uint32_t(4), uint32_t(first - 8), uint32_t(1) << 20}) {
    o.size = bad;
    EXPECT_NE(error_of(open(&o)).find(std::string(name) + ".size is " + std::to_string(bad)), std::string::npos)
        << bad << ": " << dw_last_error();
  }
  newer<T> n;
  std::memset(&n, 0, sizeof n);
  init(&n.known);
  n.known.size = uint32_t(sizeof(T) + sizeof n.more);
  n.more[5] = 1;  // a field this library would silently ignore
  EXPECT_NE(error_of(open(&n.known)).find("does not know"), std::string::npos) << dw_last_error();
}

}  // namespace

TEST(COptionsSize, EveryOpenRefusesASizeItCannotTakeAndFieldsItDoesNotKnow) {
  refuses_bad_sizes<dw_array_options>(
      dw_array_options_init,
      [](const dw_array_options* o) {
        dw_array* a = nullptr;
        const int rc = dw_array_open(o, &a);
        if (a) dw_array_close(a);
        return rc;
      },
      "dw_array_options", offsetof(dw_array_options, members));
  refuses_bad_sizes<dw_kv_options>(
      dw_kv_options_init,
      [](const dw_kv_options* o) {
        dw_kv* k = nullptr;
        const int rc = dw_kv_open(o, &k);
        if (k) dw_kv_close(k);
        return rc;
      },
      "dw_kv_options");
  refuses_bad_sizes<dw_checkpoint_options>(
      dw_checkpoint_options_init,
      [](const dw_checkpoint_options* o) {
        dw_checkpoint* c = nullptr;
        const int rc = dw_checkpoint_open(o, nullptr, 0, &c);
        if (c) dw_checkpoint_close(c);
        return rc;
      },
      "dw_checkpoint_options");
}

// A newer caller whose extra fields are all 0 (it set none of them) opens
// as it would with this library's own layout, and the fields it has are read.
TEST(COptionsSize, ANewerCallersUnsetFieldsAreTakenAndItsKnownFieldsRead) {
  newer<dw_array_options> n;
  std::memset(&n, 0, sizeof n);
  dw_array_options_init(&n.known);
  n.known.size = uint32_t(sizeof(dw_array_options) + sizeof n.more);
  n.known.path = nullptr;
  n.known.host_bytes = 1 << 20;
  n.known.row_bytes = 64;
  n.known.writable = 1;
  n.known.cache.device = -1;
  n.known.cache.cache_bytes = 256 << 10;
  dw_array* a = nullptr;
  ASSERT_EQ(dw_array_open(&n.known, &a), DW_OK) << dw_last_error();
  dw_array_info info;
  ASSERT_EQ(dw_array_info_get(a, &info), DW_OK) << dw_last_error();
  EXPECT_EQ(info.rows, (1u << 20) / 64);
  EXPECT_EQ(info.row_bytes, 64u);
  EXPECT_EQ(info.writable, 1);
  dw_array_close(a);
}

// A caller built before the array-of-drives fields (ABI 7's layout, which
// ends at the cache's settings) opens as before: the missing fields keep
// the init's defaults (one file or host memory).
TEST(COptionsSize, ACallerWithoutTheArrayFieldsOpensAsBefore) {
  dw_array_options o;
  dw_array_options_init(&o);
  o.members = reinterpret_cast<const char**>(uintptr_t(1));  // past the caller's size: never read
  o.member_count = 7;
  o.size = uint32_t(offsetof(dw_array_options, members));
  o.host_bytes = 1 << 20;
  o.row_bytes = 64;
  o.writable = 1;
  o.cache.cache_bytes = 256 << 10;
  dw_array* a = nullptr;
  ASSERT_EQ(dw_array_open(&o, &a), DW_OK) << dw_last_error();
  dw_array_info info;
  ASSERT_EQ(dw_array_info_get(a, &info), DW_OK) << dw_last_error();
  EXPECT_EQ(info.rows, (1u << 20) / 64);
  dw_array_close(a);
}
