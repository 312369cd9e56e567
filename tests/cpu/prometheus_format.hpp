// A checker of Prometheus's text exposition format (0.0.4), for tests:
// what a scraper would refuse or misread. Each line a comment (# HELP,
// # TYPE, other) or a sample `name{label="value",...} value`; a family's
// TYPE once and before its samples; names and label names valid; label
// values with only the format's escapes; numbers a scraper parses; a
// histogram's buckets cumulative by rising `le`, ending at +Inf, with
// _count equal to the +Inf bucket and a _sum. "" when the text is valid.
#pragma once
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace deepwell::test {

inline std::string exposition_problem(const std::string& text) {
  static const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex sample_re(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+))");
  static const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)\"(,|$))");
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped;
  struct hist {
    double last_le = -1e300;
    double last_count = -1;
    double inf = -1;
    double count = -1;
    bool sum = false;
  };
  std::map<std::string, hist> hists;  // family + its labels but le
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto bad = [&](const std::string& why) { return "line " + std::to_string(n) + " (" + line + "): " + why; };
  auto family_of = [&](const std::string& name, std::string& suffix) {
    for (const char* s : {"_bucket", "_sum", "_count"}) {
      const std::string t = s;
      if (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
          types.count(name.substr(0, name.size() - t.size())) &&
          types[name.substr(0, name.size() - t.size())] == "histogram") {
        suffix = t;
        return name.substr(0, name.size() - t.size());
      }
    }
    suffix.clear();
    return name;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line);
      std::string hash, kind, name;
      c >> hash >> kind >> name;
      if (kind == "TYPE") {
        std::string type;
        c >> type;
        if (!std::regex_match(name, name_re)) return bad("a bad family name");
        if (types.count(name)) return bad("TYPE twice");
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
          return bad("an unknown type");
        types[name] = type;
      } else if (kind == "HELP") {
        if (!helped.insert(name).second) return bad("HELP twice");
        if (types.count(name)) return bad("HELP after the family's TYPE and samples began");
      }
      continue;
    }
    std::smatch m;
    if (!std::regex_match(line, m, sample_re)) return bad("not a sample");
    const std::string name = m[1], labels = m[3], value = m[4];
    std::string suffix;
    const std::string fam = family_of(name, suffix);
    if (!types.count(fam)) return bad("a sample before its family's TYPE");
    char* end = nullptr;
    const double v = value == "+Inf" ? 1e308 : std::strtod(value.c_str(), &end);
    if (value != "+Inf" && value != "-Inf" && value != "NaN" && (!end || *end)) return bad("not a number");
    std::string rest = labels, key = fam, le;
    std::smatch l;
    while (!rest.empty()) {
      if (!std::regex_search(rest, l, label_re) || l.position(0) != 0) return bad("a bad label");
      if (l[1] == "le")
        le = l[2];
      else
        key += "|" + l[1].str() + "=" + l[2].str();
      rest = l.suffix();
    }
    if (types[fam] != "histogram") continue;
    hist& h = hists[key];
    if (suffix == "_bucket") {
      if (le.empty()) return bad("a bucket without le");
      const double b = le == "+Inf" ? 1e308 : std::strtod(le.c_str(), nullptr);
      if (!(b > h.last_le)) return bad("buckets not by rising le");
      if (v < h.last_count) return bad("buckets not cumulative");
      h.last_le = b;
      h.last_count = v;
      if (le == "+Inf") h.inf = v;
    } else if (suffix == "_count") {
      h.count = v;
    } else if (suffix == "_sum") {
      h.sum = true;
    } else {
      return bad("a histogram sample without _bucket, _sum or _count");
    }
  }
  for (const auto& [key, h] : hists) {
    if (h.inf < 0) return key + ": no +Inf bucket";
    if (h.count != h.inf) return key + ": _count differs from the +Inf bucket";
    if (!h.sum) return key + ": no _sum";
  }
  return "";
}

}  // namespace deepwell::test
