// `deepwell grep` with GPU warps (apps/grep/grep_gpu.cu): per (word, file)
// counts written by the kernel equal a plain scan's on the host, through a
// cache far smaller than the tree (evictions while files are read), with
// words crossing chunk boundaries, tokens longer than any word, bytes >= 0x80,
// an empty file and one file with more distinct words than a warp's table.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../common/scratch_file.hpp"
#include "grep/grep_run.hpp"

using namespace deepwell;
namespace fs = std::filesystem;

namespace {

struct grep_tree {
  fs::path top, root, out;
  grep_tree() {
    std::string t = test::scratch_dir() + "/deepwell-gpu-grep-XXXXXX";
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    top = t;
    root = top / "src";
    out = top / "out";
    fs::create_directories(root);
    fs::create_directories(out);
  }
  ~grep_tree() {
    std::error_code ec;
    fs::remove_all(top, ec);
  }
};

std::string words_text(std::mt19937_64& rng, size_t bytes, int distinct) {
  static const char* seps[] = {" ", "\n", ", ", ".", "(", "'", "\t", "\xE2\x80\x94", "-"};
  static const char* known[] = {"alpha", "beta", "gamma", "a", "I", "x_1", "can", "t", "Alpha"};
  std::string s;
  while (s.size() < bytes) {
    const unsigned k = unsigned(rng() % 10);
    if (k < 4)
      s += known[rng() % 9];
    else if (k < 8)
      s += "w" + std::to_string(rng() % distinct);
    else if (k == 8)
      s += std::string(200 + rng() % 200, 'q');
    else
      s += "alphabet";
    s += seps[rng() % 9];
  }
  s.resize(bytes);
  return s;
}

}  // namespace

TEST(GpuGrep, CountsEqualAPlainScanUnderEviction) {
  grep_tree t;
  std::mt19937_64 rng(17);
  const int files = 300;
  for (int i = 0; i < files; ++i) {
    const fs::path p = t.root / ("d" + std::to_string(i % 7)) / ("f" + std::to_string(i) + ".c");
    fs::create_directories(p.parent_path());
    const size_t bytes = i == 0 ? 0 : i == 1 ? 2000000 : size_t(rng() % 60000);
    const std::string s = words_text(rng, bytes, i == 1 ? 8000 : 300);
    std::ofstream(p, std::ios::binary).write(s.data(), std::streamsize(s.size()));
  }
  std::vector<std::string> lines = {"alpha", "beta", "gamma", "a", "I", "x_1", "can", "t"};
  for (int i = 0; i < 8000; ++i) lines.push_back("w" + std::to_string(i));
  const grep_dictionary d = make_grep_dictionary(lines);
  const auto listed = list_grep_files(t.root.string());
  ASSERT_EQ(listed.size(), size_t(files));
  grep_options o;
  o.root = t.root.string();
  o.out_dir = t.out.string();
  o.workers = 16;           // 16 warps: they may pin 512 pages, 2.5 MiB with headroom
  o.cache.cache_bytes = 4 << 20;  // a third of the tree: pages are evicted while files are read
  const grep_report r = run_grep_gpu(o, d, listed);
  EXPECT_EQ(r.counters.failed, 0u) << grep_call_name(r.counters.last_call) << " errno " << r.counters.last_err;
  EXPECT_EQ(r.counters.files, uint64_t(files));
  const grep_counts got = parse_grep_output((t.out / "grep.out").string());
  const grep_counts want = reference_grep(t.root.string(), d, listed);
  EXPECT_GT(want.size(), 10000u);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  EXPECT_EQ(fs::file_size(t.out / "grep.out"), r.output_bytes);
  uint64_t matches = 0;
  for (auto& [k, v] : want) matches += v;
  EXPECT_EQ(r.counters.matches, matches);
}

// A listed file that is gone by the time a warp opens it is counted as a
// failure with its errno (ENOENT), and the other files are still searched.
TEST(GpuGrep, AFileThatIsGoneIsReportedAndTheRestSearched) {
  grep_tree t;
  std::ofstream(t.root / "here.c") << "alpha beta alpha\n";
  const grep_dictionary d = make_grep_dictionary({"alpha", "beta"});
  grep_options o;
  o.root = t.root.string();
  o.out_dir = t.out.string();
  o.workers = 4;
  const grep_report r = run_grep_gpu(o, d, {"here.c", "gone.c"});
  EXPECT_EQ(r.counters.failed, 1u) << grep_call_name(r.counters.last_call) << " errno " << r.counters.last_err;
  EXPECT_EQ(r.counters.last_err, ENOENT);
  EXPECT_EQ(r.counters.last_call, int(grep_call::open));
  const grep_counts got = parse_grep_output((t.out / "grep.out").string());
  const grep_counts want = {{{"alpha", "here.c"}, 2}, {{"beta", "here.c"}, 1}};
  EXPECT_TRUE(got == want);
}
