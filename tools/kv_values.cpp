// The text forms of `deepwell kv` (kv_values.hpp).
#include "kv_values.hpp"

#include <cerrno>
#include <cstdlib>

#include "deepwell/common/error.hpp"
#include "deepwell/durable/kv_store.hpp"

namespace deepwell::tools {

namespace {

bool has_hex_prefix(const std::string& s) { return s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'); }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint64_t parse_kv_key(const std::string& text, const std::string& what) {
  const bool hex = has_hex_prefix(text);
  const std::string digits = hex ? text.substr(2) : text;
  // strtoull takes "-1" and " 7": refuse anything but digits.
  const bool ok = !digits.empty() && digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") ==
                                         std::string::npos;
  errno = 0;
  const unsigned long long v = ok ? std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10) : 0;
  if (!ok || errno == ERANGE || v > durable::kv_format::max_key)
    throw error(what + " '" + text + "' is not a key: keys are numbers from 0 to " +
                std::to_string(durable::kv_format::max_key) + " (decimal, or hex with 0x)");
  return v;
}

std::vector<uint8_t> parse_kv_value(const std::string& text, uint32_t value_bytes, const std::string& what) {
  std::vector<uint8_t> v(value_bytes, 0);
  if (has_hex_prefix(text)) {
    const std::string h = text.substr(2);
    if (h.empty() || h.size() % 2 != 0)
      throw error(what + " '" + text + "': a hex value needs two digits a byte after 0x (0x01ff)");
    if (h.size() / 2 > value_bytes)
      throw error(what + " '" + text + "' is " + std::to_string(h.size() / 2) + " bytes; the store's values are " +
                  std::to_string(value_bytes));
    for (size_t i = 0; i < h.size(); i += 2) {
      const int hi = hex_digit(h[i]), lo = hex_digit(h[i + 1]);
      if (hi < 0 || lo < 0) throw error(what + " '" + text + "': '" + h.substr(i, 2) + "' is not a hex byte");
      v[i / 2] = uint8_t(hi * 16 + lo);
    }
    return v;
  }
  if (text.size() > value_bytes)
    throw error(what + " '" + text + "' is " + std::to_string(text.size()) + " bytes; the store's values are " +
                std::to_string(value_bytes) + " (a longer value needs a store made with a larger --value-bytes)");
  std::copy(text.begin(), text.end(), v.begin());
  return v;
}

std::string format_kv_value(const uint8_t* value, uint32_t value_bytes, bool hex) {
  uint32_t used = value_bytes;
  if (!hex)
    while (used > 0 && value[used - 1] == 0) --used;
  std::string text(reinterpret_cast<const char*>(value), used);
  bool printable = used > 0 && text.front() != ' ' && text.back() != ' ' && !has_hex_prefix(text);
  for (char c : text) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable && !hex) return text;
  static const char digits[] = "0123456789abcdef";
  std::string out = "0x";
  for (uint32_t i = 0; i < std::max<uint32_t>(used, 1); ++i) {
    out += digits[value[i] >> 4];
    out += digits[value[i] & 15];
  }
  return out;
}

kv_pairs read_kv_pairs(std::istream& in, const std::string& name, uint32_t value_bytes) {
  kv_pairs p;
  std::string line;
  for (uint64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file from Windows
    const size_t k0 = line.find_first_not_of(" \t");
    if (k0 == std::string::npos || line[k0] == '#') continue;
    const size_t k1 = line.find_first_of(" \t", k0);
    const std::string where = name + " line " + std::to_string(n);
    if (k1 == std::string::npos) throw error(where + ": '" + line + "' has a key and no value (KEY VALUE)");
    const size_t v0 = line.find_first_not_of(" \t", k1);
    if (v0 == std::string::npos) throw error(where + ": '" + line + "' has a key and no value (KEY VALUE)");
    p.keys.push_back(parse_kv_key(line.substr(k0, k1 - k0), where + ": key"));
    const std::vector<uint8_t> v = parse_kv_value(line.substr(v0), value_bytes, where + ": value");
    p.values.insert(p.values.end(), v.begin(), v.end());
  }
  if (in.bad()) throw error("cannot read " + name);
  return p;
}

}  // namespace deepwell::tools
