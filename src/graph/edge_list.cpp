// Text edge lists: SNAP-style "src dst [weight]" lines and Matrix Market
// coordinate files.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "deepwell/common/error.hpp"
#include "deepwell/graph/build.hpp"

namespace deepwell::graph {

namespace {

struct file_closer {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};

// Whitespace-separated fields of one line (modified in place).
size_t split(char* line, char** fields, size_t max) {
  size_t n = 0;
  char* s = line;
  while (*s) {
    while (*s && std::isspace(static_cast<unsigned char>(*s))) ++s;
    if (!*s) break;
    if (n == max) return max + 1;
    fields[n++] = s;
    while (*s && !std::isspace(static_cast<unsigned char>(*s))) ++s;
    if (*s) *s++ = '\0';
  }
  return n;
}

// A field as it may appear in a message: printable ASCII kept, other bytes
// as \xNN (a binary file given as an edge list printed raw bytes), at most
// 40 characters.
std::string shown(const char* s) {
  std::string out;
  for (; *s && out.size() < 40; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (*s) out += "...";
  return out;
}

class parse_error_at {
 public:
  parse_error_at(const std::string& path, uint64_t line) : where_(path + ":" + std::to_string(line) + ": ") {}
  [[noreturn]] void fail(const std::string& msg) const { throw error(where_ + msg); }
  uint64_t id(const char* s) const {
    if (*s == '-') fail("negative node id '" + shown(s) + "'");
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || *end != '\0') fail("node id '" + shown(s) + "' is not a non-negative integer");
    // 2^64 - 1 would make 2^64 nodes (ids 0 to the largest): no count holds it.
    if (errno == ERANGE || v == UINT64_MAX) fail("node id '" + shown(s) + "' is too large");
    return v;
  }
  double weight(const char* s) const {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v)) fail("weight '" + shown(s) + "' is not a number");
    return v;
  }

 private:
  std::string where_;
};

// Picks the narrowest weight type that holds every weight exactly.
void finish_weights(edge_list& e, const std::vector<double>& w) {
  if (w.empty()) return;
  bool integral = true;
  for (double x : w) integral &= x >= 0 && x < 4294967296.0 && x == std::floor(x);
  e.weights = integral ? weight_type::u32 : weight_type::f32;
  e.w.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    if (integral) {
      e.w[i] = uint32_t(w[i]);
    } else {
      const float f = float(w[i]);
      std::memcpy(&e.w[i], &f, 4);
    }
  }
}

}  // namespace

edge_list read_edge_list(const std::string& path, text_format f, progress* p) {
  std::unique_ptr<FILE, file_closer> in(std::fopen(path.c_str(), "r"));
  if (!in) throw error(errno_message("open " + path, errno));
  struct stat st {};
  const uint64_t size = ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
  char* buf = nullptr;
  size_t cap = 0;
  std::unique_ptr<char, decltype(&std::free)> hold(nullptr, &std::free);
  ssize_t len = 0;
  uint64_t lineno = 0;
  auto next = [&]() -> bool {
    len = ::getline(&buf, &cap, in.get());
    hold.release();
    hold.reset(buf);
    if (len < 0) return false;
    ++lineno;
    if (p) p->advance(uint64_t(len));
    return true;
  };

  edge_list e;
  e.origin = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::vector<double> w;
  if (p) p->phase("read " + e.origin.substr(0, 16), size);
  if (!next()) throw error(path + ": empty file");
  const bool mm_header = std::strncmp(buf, "%%MatrixMarket", 14) == 0;
  if (f == text_format::automatic) f = mm_header ? text_format::matrix_market : text_format::snap;

  if (f == text_format::matrix_market) {
    const parse_error_at at(path, lineno);
    if (!mm_header) at.fail("no %%MatrixMarket header (is this a SNAP edge list? use --format snap)");
    char* fld[8];
    const size_t n = split(buf, fld, 8);
    if (n != 5 || std::strcmp(fld[1], "matrix") != 0 || std::strcmp(fld[2], "coordinate") != 0)
      at.fail("only 'matrix coordinate' Matrix Market files hold graphs");
    const std::string field = fld[3], sym = fld[4];
    const bool pattern = field == "pattern";
    if (!pattern && field != "integer" && field != "real")
      at.fail("field '" + field + "' (pattern, integer or real are supported)");
    if (sym != "general" && sym != "symmetric") at.fail("symmetry '" + sym + "' (general or symmetric are supported)");
    e.symmetric_input = sym == "symmetric";
    // Size line after comments.
    uint64_t rows = 0, cols = 0, nnz = 0;
    for (;;) {
      if (!next()) throw error(path + ": no size line");
      if (buf[0] == '%') continue;
      const parse_error_at sl(path, lineno);
      char* s[4];
      if (split(buf, s, 4) != 3) sl.fail("expected 'rows columns entries'");
      rows = sl.id(s[0]);
      cols = sl.id(s[1]);
      nnz = sl.id(s[2]);
      break;
    }
    e.nodes = std::max(rows, cols);
    // Room for the entries the file can hold (4 bytes a line at least),
    // not for what its size line claims (99999999999999 was bad_alloc).
    const uint64_t fits = size ? size / 4 + 1 : nnz;
    e.src.reserve(std::min(nnz, fits));
    e.dst.reserve(std::min(nnz, fits));
    while (next()) {
      if (buf[0] == '%') continue;
      const parse_error_at el(path, lineno);
      char* s[4];
      const size_t k = split(buf, s, 4);
      if (k == 0) continue;
      if (k != (pattern ? 2u : 3u)) el.fail(pattern ? "expected 'row column'" : "expected 'row column value'");
      const uint64_t r = el.id(s[0]), c = el.id(s[1]);
      if (r == 0 || c == 0 || r > rows || c > cols)
        el.fail("entry (" + std::to_string(r) + ", " + std::to_string(c) + ") outside the " + std::to_string(rows) +
                " x " + std::to_string(cols) + " matrix (ids are 1-based)");
      e.src.push_back(r - 1);
      e.dst.push_back(c - 1);
      if (!pattern) w.push_back(el.weight(s[2]));
    }
    if (e.src.size() != nnz)
      throw error(path + ": " + std::to_string(e.src.size()) + " entries, the size line says " + std::to_string(nnz) +
                  " (truncated?)");
  } else {
    int columns = -1;  // 2 or 3, fixed by the first edge line
    uint64_t max_id = 0;
    bool any = false;
    do {
      if (len == 0 || buf[0] == '#' || buf[0] == '%') continue;
      char* s[4];
      const parse_error_at el(path, lineno);
      const size_t k = split(buf, s, 3);
      if (k == 0) continue;
      if (k < 2 || k > 3) el.fail("expected 'source target [weight]'");
      if (columns < 0) columns = int(k);
      if (int(k) != columns)
        el.fail("has " + std::to_string(k) + " fields, earlier lines had " + std::to_string(columns) +
                " (a weight on some edges only?)");
      const uint64_t u = el.id(s[0]), v = el.id(s[1]);
      max_id = std::max({max_id, u, v});
      any = true;
      e.src.push_back(u);
      e.dst.push_back(v);
      if (k == 3) w.push_back(el.weight(s[2]));
    } while (next());
    if (!any) throw error(path + ": no edges");
    e.nodes = max_id + 1;
  }
  finish_weights(e, w);
  if (p) p->done();
  return e;
}

}  // namespace deepwell::graph
