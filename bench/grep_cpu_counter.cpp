// The CPU baseline of `deepwell grep` (issue 47's grep_gpu_vs_cpu_threads):
// a plain multithreaded whole-word dictionary counter, as a competent
// engineer would write it for this job, sharing no code with deepwell.
//
//   grep_cpu_counter TREE --dict WORDS --out FILE [--threads N]
//
// It lists the regular files under TREE (symlinks not followed), loads the
// dictionary into an open-addressing hash table, and then every thread takes
// the next file (an atomic index), reads it whole with read(), splits it into
// words (maximal runs of ASCII letters, digits and '_', as deepwell and
// ripgrep -w --no-unicode split them), looks each word up, counts the hits of
// the file in a per-thread array indexed by word, and appends
// "count<TAB>word<TAB>path" lines to a per-thread buffer that is written to
// the output file with pwrite at offsets taken from an atomic cursor (so the
// threads never wait on one another for the output). One JSON line on stdout:
// the times of the listing, the dictionary and the search (threads started
// to output closed: deepwell grep's "seconds" is the same span).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "grep_cpu_counter: %s\n", what.c_str());
  std::exit(2);
}

struct word_bytes {
  bool is[256] = {};
  word_bytes() {
    for (int c = 0; c < 256; ++c) is[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
};
const word_bytes kWord;

// 8 bytes at a time: the words are short and the table is probed once a word.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

struct dictionary {
  std::string blob;
  std::vector<uint32_t> offs{0};
  struct slot {
    uint32_t tag = 0;  // the hash's high half
    uint32_t id = 0;   // word index + 1; 0: empty
  };
  std::vector<slot> table;
  uint64_t mask = 0;
  size_t max_len = 0;

  size_t size() const { return offs.size() - 1; }
  std::string_view word(uint32_t i) const { return {blob.data() + offs[i], size_t(offs[i + 1] - offs[i])}; }

  int64_t find(const char* p, size_t n) const {
    if (n > max_len) return -1;
    const uint64_t h = hash_bytes(p, n);
    const uint32_t tag = uint32_t(h >> 32);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
      const slot s = table[i];
      if (s.id == 0) return -1;
      if (s.tag == tag) {
        const std::string_view w = word(s.id - 1);
        if (w.size() == n && std::memcmp(w.data(), p, n) == 0) return s.id - 1;
      }
    }
  }

  // One word a line; lines that are not a word of word bytes (at most 255)
  // and repeats are left out, as deepwell grep keeps its dictionary.
  static dictionary load(const std::string& path) {
    std::ifstream in(path);
    if (!in) die("cannot read the dictionary " + path);
    dictionary d;
    std::string all, line;
    std::vector<std::pair<size_t, size_t>> spans;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line.size() > 255) continue;
      bool ok = true;
      for (unsigned char c : line) ok = ok && kWord.is[c];
      if (!ok) continue;
      spans.emplace_back(all.size(), line.size());
      all += line;
    }
    size_t cap = 16;
    while (cap < 2 * spans.size()) cap *= 2;
    d.table.resize(cap);
    d.mask = cap - 1;
    for (const auto& [at, n] : spans) {
      if (d.find(all.data() + at, n) >= 0) continue;  // a repeat
      const uint64_t h = hash_bytes(all.data() + at, n);
      uint64_t i = h & d.mask;
      while (d.table[i].id) i = (i + 1) & d.mask;
      d.blob.append(all, at, n);
      d.offs.push_back(uint32_t(d.blob.size()));
      d.table[i] = {uint32_t(h >> 32), uint32_t(d.size())};
      d.max_len = std::max(d.max_len, n);
    }
    if (d.size() == 0) die("the dictionary " + path + " holds no usable word");
    return d;
  }
};

// Regular files under root, relative to it (symlinks not followed).
void list_files(const std::string& root, const std::string& rel, std::vector<std::string>& out) {
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    const std::string r = rel.empty() ? e->d_name : rel + "/" + e->d_name;
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
    }
    if (type == DT_DIR) list_files(root, r, out);
    else if (type == DT_REG) out.push_back(r);
  }
  ::closedir(d);
}

struct output {
  int fd = -1;
  std::atomic<uint64_t> cursor{0};
  std::atomic<bool> failed{false};
  void write(const std::string& text) {
    if (text.empty()) return;
    uint64_t at = cursor.fetch_add(text.size());
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, off_t(at + done));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        failed = true;
        return;
      }
      done += size_t(n);
    }
  }
};

struct totals {
  std::atomic<uint64_t> files{0}, bytes{0}, matches{0}, lines{0}, unreadable{0};
};

void count_files(const std::string& root, const std::vector<std::string>& files, std::atomic<size_t>& next,
                 const dictionary& d, output& out, totals& t) {
  std::vector<uint32_t> counts(d.size(), 0);
  std::vector<uint32_t> seen;  // the words of the current file, in order of first hit
  std::vector<char> buf(1 << 20);
  std::string text;
  const int rootfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  uint64_t files_done = 0, bytes = 0, matches = 0, lines = 0;
  for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < files.size();) {
    const std::string& path = files[k];
    const int fd = ::openat(rootfd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      t.unreadable++;
      continue;
    }
    size_t n = 0;
    for (;;) {
      if (n == buf.size()) buf.resize(buf.size() * 2);
      const ssize_t r = ::read(fd, buf.data() + n, buf.size() - n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r < 0) t.unreadable++;
        break;
      }
      n += size_t(r);
    }
    ::close(fd);
    const unsigned char* p = reinterpret_cast<const unsigned char*>(buf.data());
    for (size_t i = 0; i < n;) {
      if (!kWord.is[p[i]]) {
        ++i;
        continue;
      }
      size_t e = i + 1;
      while (e < n && kWord.is[p[e]]) ++e;
      const int64_t id = d.find(buf.data() + i, e - i);
      if (id >= 0) {
        if (counts[id]++ == 0) seen.push_back(uint32_t(id));
        ++matches;
      }
      i = e;
    }
    for (uint32_t id : seen) {
      char num[16];
      char* e = std::to_chars(num, num + sizeof num, counts[id]).ptr;
      *e++ = '\t';
      text.append(num, e);
      text += d.word(id);
      text += '\t';
      text += path;
      text += '\n';
      counts[id] = 0;
    }
    lines += seen.size();
    seen.clear();
    if (text.size() >= (4u << 20)) {
      out.write(text);
      text.clear();
    }
    ++files_done;
    bytes += n;
  }
  out.write(text);
  if (rootfd >= 0) ::close(rootfd);
  t.files += files_done;
  t.bytes += bytes;
  t.matches += matches;
  t.lines += lines;
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = clock_type::now();
  std::string root, dict_path, out_path;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dict") dict_path = value();
    else if (a == "--out") out_path = value();
    else if (a == "--threads") {
      const std::string v = value();
      char* end = nullptr;
      const unsigned long t = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || t == 0 || t > 4096) die("--threads wants 1 to 4096, not " + v);
      threads = unsigned(t);
    } else if (!a.empty() && a[0] == '-') die("unknown option " + a);
    else if (root.empty()) root = a;
    else die("one tree only (" + root + ", then " + a + ")");
  }
  if (root.empty() || dict_path.empty() || out_path.empty())
    die("usage: grep_cpu_counter TREE --dict WORDS --out FILE [--threads N]");
  struct stat st;
  if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) die(root + " is not a directory");

  auto t = clock_type::now();
  std::vector<std::string> files;
  list_files(root, "", files);
  const double list_s = since(t);
  t = clock_type::now();
  const dictionary d = dictionary::load(dict_path);
  const double dict_s = since(t);

  t = clock_type::now();
  output out;
  out.fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out.fd < 0) die("cannot open " + out_path + " for writing: " + std::strerror(errno));
  totals tot;
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k)
    pool.emplace_back([&] { count_files(root, files, next, d, out, tot); });
  for (auto& th : pool) th.join();
  if (::close(out.fd) != 0) out.failed = true;
  const double search_s = since(t);
  if (out.failed) die("writing " + out_path + " failed");

  std::printf(
      "{\"tool\":\"cpu word counter\",\"threads\":%u,\"files\":%zu,\"bytes\":%llu,\"matches\":%llu,\"lines\":%llu,"
      "\"unreadable\":%llu,\"words\":%zu,\"output_bytes\":%llu,\"list_seconds\":%.6f,\"dict_seconds\":%.6f,"
      "\"search_seconds\":%.6f,\"main_seconds\":%.6f}\n",
      threads, files.size(), (unsigned long long)tot.bytes, (unsigned long long)tot.matches,
      (unsigned long long)tot.lines, (unsigned long long)tot.unreadable, d.size(),
      (unsigned long long)out.cursor.load(), list_s, dict_s, search_s, since(start));
  return tot.unreadable ? 1 : 0;
}
