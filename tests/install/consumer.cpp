// A user's program against an installed deepwell: one umbrella include, an
// in-process controller, a host page cache an eighth of the file, and every
// value read back checked.
#include <deepwell/deepwell.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

int main() try {
  const std::string path = "/tmp/deepwell-consumer-" + std::to_string(getpid()) + ".bin";
  std::vector<uint64_t> v(8192);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i * 3;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  deepwell::controller ctl;
  const uint32_t ns = ctl.add_namespace({deepwell::open_file_target(path), 4096, true});
  deepwell::cache_config cc;
  cc.page_size = 4096;
  cc.capacity_bytes = 2 * 4096;
  auto cache = deepwell::make_host_page_cache(ctl, cc);
  deepwell::array<uint64_t> a(cache, ns);
  const auto r = a.ref();
  int bad = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (r[i] != v[i] && bad++ < 5) std::printf("index %zu: %llu, not %llu\n", i, (unsigned long long)r[i],
                                                (unsigned long long)v[i]);
  std::remove(path.c_str());
  std::printf("%s: %zu values, %d wrong\n", bad ? "FAILED" : "ok", v.size(), bad);
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
