// Sizes written as text, read by one rule wherever a user writes one: the
// command line (--cache 1TiB), the environment (DEEPWELL_CACHE_BYTES=1TiB),
// the server's TOML (host_cache = "1TiB") and Python (cache_size="1TiB",
// through the C ABI's dw_parse_size).
//
//   a number (digits, or a decimal such as 1.5), an optional space, and an
//   optional unit: B, K, M, G or T (KiB, MiB, GiB, TiB; KB, MB, GB, TB;
//   any case): powers of 1024. The result must be a whole number of bytes
//   and below 2^63.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepwell {

// The bytes `text` says, or nothing when it is not a size by that rule.
std::optional<uint64_t> parse_size(std::string_view text);

// What a message says after "'TEXT' is not a size".
inline constexpr const char* size_examples = "(examples: 4096, 512K, 64MiB, 1.5GiB, 1TiB)";

}  // namespace deepwell
