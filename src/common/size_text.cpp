#include "deepwell/common/size_text.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace deepwell {

std::optional<uint64_t> parse_size(std::string_view text) {
  const std::string s(text);
  // A sign or leading space is not a size (strtod would take them).
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno == ERANGE || !std::isfinite(v) || v < 0) return std::nullopt;
  // strtod reads hex and exponents too: only digits and one point are a number here.
  for (const char* p = s.c_str(); p != end; ++p)
    if (!std::isdigit(static_cast<unsigned char>(*p)) && *p != '.') return std::nullopt;
  std::string unit(end);
  if (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
  if (shift < 0) return std::nullopt;
  const double bytes = std::ldexp(v, shift);
  if (bytes >= 9.2e18 || std::floor(bytes) != bytes) return std::nullopt;  // past 2^63, or a fraction of a byte
  return uint64_t(bytes);
}

}  // namespace deepwell
