// `deepwell grep` with CPU workers (files/grep.hpp through the file API):
// per (word, file) counts equal a plain scan's, on generated text whose
// words cross chunk boundaries, with tokens longer than any word, binary
// bytes, empty files and files with more distinct words than a worker's
// table holds; and equal ripgrep's (rg -w --no-unicode) where rg is
// installed. Emulated warps run the same worker.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"
#include "grep/grep_run.hpp"
#include "cache_test_support.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
namespace fs = std::filesystem;

namespace {

struct tree {
  fs::path root, out;
  tree() {
    std::string t = test::scratch_dir() + "/deepwell-grep-XXXXXX";
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    root = fs::path(t) / "src";
    out = fs::path(t) / "out";
    fs::create_directories(root);
    fs::create_directories(out);
  }
  ~tree() {
    std::error_code ec;
    fs::remove_all(root.parent_path(), ec);
  }
};

std::vector<std::string> dictionary_lines() {
  std::vector<std::string> d = {"alpha", "beta", "gamma", "delta", "a", "I", "x_1", "Zeta9", "can", "t",
                                "don't", "café", "two words", ""};  // the last four are dropped
  for (int i = 0; i < 6000; ++i) d.push_back("w" + std::to_string(i));
  return d;
}

// Text of words, separators, long tokens and a few bytes >= 0x80.
std::string text(std::mt19937_64& rng, size_t bytes, int distinct) {
  static const char* seps[] = {" ", "\n", ", ", ".", "(", ")", "'", "\t", "\xE2\x80\x94", "\xC3\xA9", "-", "\0"};
  static const char* known[] = {"alpha", "beta", "gamma", "delta", "a", "I", "x_1", "Zeta9", "can", "t", "Alpha"};
  std::string s;
  while (s.size() < bytes) {
    const unsigned k = unsigned(rng() % 10);
    if (k < 4)
      s += known[rng() % 11];
    else if (k < 7)
      s += "w" + std::to_string(rng() % distinct);
    else if (k == 7)
      s += std::string(300 + rng() % 20, 'q');  // longer than any word
    else
      s += "alphabet";                          // a word that only starts with one
    const char* sep = seps[rng() % 12];
    s.append(sep, *sep ? std::strlen(sep) : 1);
  }
  return s;
}

// 40 files (or `files`), one empty and, if `big`, one of 1.5 MB with more
// distinct words than half a worker's table.
void make_tree(const tree& t, int files = 40, size_t max_bytes = 30000, bool big = true) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < files; ++i) {
    const fs::path p = t.root / ("d" + std::to_string(i % 5)) / ("f" + std::to_string(i) + ".c");
    fs::create_directories(p.parent_path());
    const size_t bytes = i == 0 ? 0 : i == 1 && big ? 1500000 : size_t(rng() % max_bytes);
    const std::string s = text(rng, bytes, i == 1 ? 6000 : 200);
    std::ofstream(p, std::ios::binary).write(s.data(), std::streamsize(bytes ? s.size() : 0));
  }
}

// Options for a CPU run over t's tree into t's output directory.
grep_options options_for(const tree& t, unsigned workers) {
  grep_options o;
  o.root = t.root.string();
  o.out_dir = t.out.string();
  o.workers = workers;
  return o;
}

}  // namespace

TEST(Grep, CountsEqualAPlainScan) {
  tree t;
  make_tree(t);
  const grep_dictionary d = make_grep_dictionary(dictionary_lines());
  EXPECT_EQ(d.dropped, 4u);
  const auto files = list_grep_files(t.root.string());
  ASSERT_EQ(files.size(), 40u);
  grep_options o = options_for(t, 3);
  o.cache.cache_bytes = 64 * 4096;  // small: evictions while files are read
  const grep_report r = run_grep_cpu(o, d, files);
  EXPECT_EQ(r.counters.failed, 0u) << r.counters.last_err;
  EXPECT_EQ(r.counters.files, 40u);
  const grep_counts got = parse_grep_output((t.out / "grep.out").string());
  const grep_counts want = reference_grep(t.root.string(), d, files);
  uint64_t big_pairs = 0;
  for (auto& [k, v] : want) big_pairs += k.second == "d1/f1.c";
  EXPECT_GT(big_pairs, uint64_t(grep_table / 2));  // more than a worker's table half: several flushes
  EXPECT_EQ(got, want);
  EXPECT_EQ(fs::file_size(t.out / "grep.out"), r.output_bytes);
  uint64_t matches = 0;
  for (auto& [k, v] : want) matches += v;
  EXPECT_EQ(r.counters.matches, matches);
}

// A file longer than grep_piece_bytes is counted in pieces by several
// workers: a word belongs to the piece where it starts, whether it runs
// over the piece's end or starts on its first byte, and a piece's first
// byte inside a longer token starts no word. With one worker the opener
// counts its own pieces.
TEST(Grep, PiecesOfALargeFileCountEveryWordOnce) {
  for (unsigned workers : {1u, 4u}) {
    tree t;
    const size_t P = grep_piece_bytes;
    std::string s(3 * P + 100, ' ');
    auto put = [&](size_t at, const std::string& w) { s.replace(at, w.size(), w); };
    put(P - 2, "alpha");       // runs over the first piece's end
    put(2 * P, "beta");        // starts on the third piece's first byte
    put(2 * P - 1, "Q");       // ... no: "Qbeta" is one token, no word
    put(P + 7, "beta");        // inside the second piece
    put(3 * P - 1, "qgamma");  // "gamma" starts the fourth piece inside a token: no word
    put(3 * P + 10, "gamma");  // the last piece's own
    put(0, "delta");           // the first byte
    put(s.size() - 5, "alpha");  // the last bytes
    for (size_t at = 100; at + 6 < P; at += 997) put(at, "w17");  // many of one word in the first piece
    std::ofstream(t.root / "big.txt", std::ios::binary).write(s.data(), std::streamsize(s.size()));
    const grep_dictionary d = make_grep_dictionary(dictionary_lines());
    const auto files = list_grep_files(t.root.string());
    const grep_report r = run_grep_cpu(options_for(t, workers), d, files);
    EXPECT_EQ(r.counters.failed, 0u) << r.counters.last_err;
    EXPECT_EQ(r.counters.files, 1u);
    EXPECT_EQ(r.counters.bytes, s.size());
    const grep_counts got = parse_grep_output((t.out / "grep.out").string());
    EXPECT_EQ(got, reference_grep(t.root.string(), d, files)) << workers << " workers";
    const grep_counts want = {{{"alpha", "big.txt"}, 2}, {{"beta", "big.txt"}, 1}, {{"gamma", "big.txt"}, 1},
                              {{"delta", "big.txt"}, 1}, {{"w17", "big.txt"}, (P - 107) / 997 + 1}};
    EXPECT_EQ(got, want) << workers << " workers";
  }
}

TEST(Grep, CountsEqualRipgrepWhereItIsInstalled) {
  if (std::system("rg --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "ripgrep (rg) is not installed";
  tree t;
  make_tree(t);
  const grep_dictionary d = make_grep_dictionary(dictionary_lines());
  const fs::path dict = t.out.parent_path() / "dict";
  {
    std::ofstream o(dict);
    for (auto& w : d.words) o << w << "\n";
  }
  const auto files = list_grep_files(t.root.string());
  grep_options o = options_for(t, 2);
  run_grep_cpu(o, d, files);
  const grep_counts got = parse_grep_output((t.out / "grep.out").string());
  // rg prints "path:word" per match (-o), all files (-uu -a), ASCII words (--no-unicode).
  const fs::path rg_out = t.out.parent_path() / "rg.out";
  const std::string cmd = "cd '" + t.root.string() + "' && rg -uu -a --no-unicode -F -w -o --no-heading --with-filename " +
                          "--no-line-number -f '" + dict.string() + "' . > '" + rg_out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  grep_counts rg;
  std::ifstream in(rg_out);
  for (std::string l; std::getline(in, l);) {
    const size_t c = l.rfind(':');
    std::string path = l.substr(0, c);
    if (path.rfind("./", 0) == 0) path = path.substr(2);
    ++rg[{l.substr(c + 1), path}];
  }
  EXPECT_EQ(got, rg);
}

TEST(Grep, EmulatedWarpsRunTheSameWorker) {
  tree t;
  make_tree(t, 8, 9000, false);  // small: each collective is a barrier of threads on a CI machine's two cores
  const grep_dictionary d = make_grep_dictionary(dictionary_lines());
  const auto files = list_grep_files(t.root.string());
  controller ctl;
  auto cache = make_host_page_cache(ctl, test::small_cache(4 * 32));
  file_system_options io;
  io.root = t.root.string();
  auto in = make_host_file_system(cache, io);
  io.root = t.out.string();
  auto out = make_host_file_system(cache, io);
  host_grep_run run(d, files, in->ref(), out->ref(), 2);
  grep_job& j = run.job;
  j.out_file = j.out.gopen("grep.out", g_rdwr | g_creat);
  ASSERT_TRUE(j.out_file.ok());
  std::vector<std::thread> warps;
  for (uint32_t id = 0; id < 2; ++id)
    warps.emplace_back([&, id] {
      test::run_warp(id == 1 ? 0x0F00000Fu : 0x000000FFu, id, [&](test::emulated_warp w) { grep_worker(w, j, id); });
    });
  for (auto& th : warps) th.join();
  ASSERT_EQ(j.out.gclose(j.out_file), 0);
  EXPECT_EQ(run.counters.failed, 0u) << run.counters.last_err;
  EXPECT_EQ(parse_grep_output((t.out / "grep.out").string()), reference_grep(t.root.string(), d, files));
}

TEST(Grep, BadInputIsNamed) {
  EXPECT_THROW(load_grep_dictionary("/nonexistent/dict"), error);
  EXPECT_THROW(list_grep_files("/nonexistent/tree"), error);
  tree t;
  std::ofstream(t.out / "bad") << "12\tonlytwo\n3 no tabs\n";
  EXPECT_THROW(parse_grep_output((t.out / "bad").string()), error);
}

// --fsync: the closed output is made durable (fdatasync) inside the timed
// run and holds every count; an output that cannot be opened is named.
TEST(Grep, AnFsyncedOutputHasEveryCountAndAMissingOneIsNamed) {
  tree t;
  std::ofstream(t.root / "a.c") << "alpha beta alpha\n";
  const grep_dictionary d = make_grep_dictionary({"alpha", "beta"});
  grep_options o = options_for(t, 2);
  o.fsync = true;
  const grep_report r = run_grep_cpu(o, d, {"a.c"});
  EXPECT_EQ(r.counters.failed, 0u);
  const grep_counts want = {{{"alpha", "a.c"}, 2}, {{"beta", "a.c"}, 1}};
  EXPECT_TRUE(parse_grep_output((t.out / "grep.out").string()) == want);
  grep_options missing = o;
  missing.out_name = "not-written.out";
  try {
    make_grep_output_durable(missing);
    FAIL() << "no error for a missing output";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("not-written.out"), std::string::npos) << e.what();
  }
}

// A listed file that is gone by the time a worker opens it is counted as a
// failure with its errno (ENOENT), and the other files are still searched.
TEST(Grep, AFileThatIsGoneIsReportedAndTheRestSearched) {
  tree t;
  std::ofstream(t.root / "here.c") << "alpha beta alpha\n";
  const grep_dictionary d = make_grep_dictionary({"alpha", "beta"});
  grep_options o = options_for(t, 2);
  const grep_report r = run_grep_cpu(o, d, {"here.c", "gone.c"});
  EXPECT_EQ(r.counters.failed, 1u);
  EXPECT_EQ(r.counters.last_err, ENOENT);
  EXPECT_EQ(r.counters.last_call, int(grep_call::open));
  const grep_counts got = parse_grep_output((t.out / "grep.out").string());
  const grep_counts want = {{{"alpha", "here.c"}, 2}, {{"beta", "here.c"}, 1}};
  EXPECT_TRUE(got == want);
}
