// The controller's copies (detail/staging_copy.hpp): every kind of store
// copies exactly the bytes asked for, at any alignment and length (the
// streamed path takes whole lines at a 16-byte aligned destination and
// leaves the rest to memcpy), and writes nothing around them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "deepwell/common/detail/staging_copy.hpp"

namespace deepwell::test {
namespace {

using detail::staging_stores;

void check_copy(void (*copy)(void*, const void*, size_t, staging_stores), staging_stores kind, const char* name) {
  std::vector<uint8_t> src(8192 + 128), dst(8192 + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  for (size_t dst_off : {0, 1, 8, 16, 48, 63}) {
    for (size_t src_off : {0, 3, 16}) {
      for (size_t len : {0, 1, 15, 63, 64, 65, 127, 4096, 4097, 8191}) {
        std::fill(dst.begin(), dst.end(), uint8_t(0xEE));
        // 64-byte aligned base, so that dst_off decides the alignment.
        uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(dst.data()) + 63) & ~uintptr_t(63));
        copy(base + dst_off, src.data() + src_off, len, kind);
        for (size_t i = 0; i < len; ++i)
          ASSERT_EQ(base[dst_off + i], src[src_off + i])
              << name << ": byte " << i << " of " << len << " (dst +" << dst_off << ", src +" << src_off << ")";
        for (uint8_t* p = dst.data(); p < base + dst_off; ++p) ASSERT_EQ(*p, 0xEE) << name << ": wrote before the copy";
        for (uint8_t* p = base + dst_off + len; p < dst.data() + dst.size(); ++p)
          ASSERT_EQ(*p, 0xEE) << name << ": wrote past the copy (len " << len << ")";
      }
    }
  }
}

TEST(StagingCopy, EveryKindCopiesExactlyTheBytesAtAnyAlignment) {
  auto to_staging = [](void* d, const void* s, size_t n, staging_stores k) { detail::copy_to_staging(d, s, n, k); };
  check_copy(to_staging, staging_stores::streaming, "streaming");
  check_copy(to_staging, staging_stores::cached, "cached");
  check_copy(to_staging, staging_stores::demote, "demote");
  auto streamed = [](void* d, const void* s, size_t n, staging_stores) { detail::copy_streaming(d, s, n); };
  check_copy(streamed, staging_stores::streaming, "copy_streaming");
}

}  // namespace
}  // namespace deepwell::test
