// The text forms of `deepwell kv`'s keys and values, and its --from file.
//
// A key is a number, 0 to 2^64 - 3 (kv_format::max_key): decimal, or hex
// with 0x. A value is text (its bytes, padded with zeros to the store's
// value size) or hex with 0x ("0x0102ff": those bytes, padded with zeros).
// A value longer than the store's value size is refused, never cut.
//
// Values are printed so that they read back the same: as text when they
// are printable ASCII with no leading or trailing blank and no 0x in front
// (their trailing zeros dropped), else as hex (0x and every byte up to the
// last non-zero one; 0x00 for a value of zeros).
//
// The --from file: one pair a line, "KEY VALUE" (VALUE is the rest of the
// line after the blanks that follow KEY, so text values may hold spaces);
// blank lines and lines starting with # are skipped; "-" reads stdin.
// `deepwell kv get` prints found pairs in the same form, so its output is a
// --from file.
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace deepwell::tools {

// Throws deepwell::error naming `what` ("key", "line 7") and the text.
uint64_t parse_kv_key(const std::string& text, const std::string& what = "key");
// `value_bytes` bytes: the value, then zeros.
std::vector<uint8_t> parse_kv_value(const std::string& text, uint32_t value_bytes, const std::string& what = "value");
std::string format_kv_value(const uint8_t* value, uint32_t value_bytes, bool hex = false);

struct kv_pairs {
  std::vector<uint64_t> keys;
  std::vector<uint8_t> values;  // value_bytes a key, in the order of keys
};
// Reads a --from stream; errors name `name` and the line.
kv_pairs read_kv_pairs(std::istream& in, const std::string& name, uint32_t value_bytes);

}  // namespace deepwell::tools
