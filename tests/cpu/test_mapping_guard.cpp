// A file cut short under a read-only mapping: a read past its new end
// finds zeros and the mapping says it was cut, where the process would
// have ended with SIGBUS; a SIGBUS outside every guarded mapping still ends
// the process as before.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/mapping_guard.hpp"
#include "deepwell/common/host_mapping.hpp"

namespace {

std::string make_file(const char* name, size_t bytes) {
  const std::string path = ::testing::TempDir() + name + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(i * 7 + 1);
  EXPECT_EQ(::pwrite(fd, v.data(), bytes, 0), ssize_t(bytes));
  ::close(fd);
  return path;
}

}  // namespace

TEST(MappingGuard, AReadPastATruncatedEndFindsZerosAndTheMappingIsCut) {
  const std::string path = make_file("guard-", 64 << 10);
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::shared_ptr<deepwell::host_mapping> m = deepwell::map_file_readonly(fd, 0, 64 << 10);
  ::close(fd);
  ASSERT_TRUE(m);
  const volatile unsigned char* p = m->data;
  EXPECT_EQ(p[40000], static_cast<unsigned char>(40000 * 7 + 1));
  EXPECT_FALSE(m->cut());
  ASSERT_EQ(::truncate(path.c_str(), 16 << 10), 0);
  EXPECT_EQ(p[100], static_cast<unsigned char>(100 * 7 + 1));  // before the new end: as it was
  EXPECT_FALSE(m->cut());
  EXPECT_EQ(p[40000], 0);  // past it: zeros, no SIGBUS
  EXPECT_EQ(p[60000], 0);
  EXPECT_TRUE(m->cut());
  m.reset();
  ::unlink(path.c_str());
}

TEST(MappingGuard, AnUnguardedMappingStillEndsTheProcess) {
  const std::string path = make_file("unguarded-", 64 << 10);
  // A guarded mapping exists, so the handler is installed; this one is not guarded.
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::shared_ptr<deepwell::host_mapping> m = deepwell::map_file_readonly(fd, 0, 64 << 10);
  void* raw = ::mmap(nullptr, 64 << 10, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(raw, MAP_FAILED);
  auto touch = [&] {
    if (::truncate(path.c_str(), 4096) != 0) std::_Exit(0);  // no fault to take: the test fails
    const volatile unsigned char* p = static_cast<unsigned char*>(raw);
    (void)p[40000];
    std::_Exit(0);
  };
  // Ended by SIGBUS (or, under a sanitizer, by its report of the SIGBUS):
  // never carried on to exit 0.
  EXPECT_EXIT(touch(), [](int st) { return !(WIFEXITED(st) && WEXITSTATUS(st) == 0); }, "");
  ::munmap(raw, 64 << 10);
  ::unlink(path.c_str());
}

TEST(MappingGuard, SlotsComeBack) {
  int x = 0;
  std::vector<int> slots;
  for (int i = 0; i < 5000; ++i) {
    const int s = deepwell::detail::guard_mapping(&x, sizeof x);
    if (s < 0) break;
    slots.push_back(s);
  }
  EXPECT_GT(slots.size(), 1000u);
  EXPECT_LT(slots.size(), 5000u);  // bounded, and -1 past the bound (unguarded, not an error)
  for (int s : slots) deepwell::detail::unguard_mapping(s);
  const int again = deepwell::detail::guard_mapping(&x, sizeof x);
  EXPECT_GE(again, 0);
  deepwell::detail::unguard_mapping(again);
}
