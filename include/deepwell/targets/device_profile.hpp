// What the storage under a dataset can do, for choosing how to read it
// (read_route.hpp): random reads a second at a page's size with some in
// flight, and sequential bytes a second with large requests. Measured once
// by a short probe of a file on that storage (O_DIRECT, so the page cache
// does not answer for the disk) and kept in a small file under
// $XDG_CACHE_HOME/deepwell/device-profiles/ (else ~/.cache/...) named by
// the file system's device number; or given as text
//
//   iops=70000,bandwidth=1.5GiB[,read=4KiB][,depth=64]
//
// (bandwidth: bytes a second, any size text.hpp takes). Where it can be
// neither measured nor read, the built-in defaults (defaults.hpp) stand in
// and the profile says why.
#pragma once
#include <cstdint>
#include <string>

namespace deepwell {

struct device_profile {
  double random_iops = 0;           // random reads a second of read_bytes, `depth` in flight
  uint32_t read_bytes = 4096;       // the random reads' size
  uint32_t depth = 64;              // reads in flight when measured
  double seq_bytes_per_s = 0;       // sequential, large requests, several in flight
  std::string source;               // "measured", "cached", "given", "environment" or "default"
  std::string note;                 // where from, or why defaults stand in
  std::string key;                  // the storage's name in the cache ("dev-8-1"), if known
};

// Parses the text form above. Throws deepwell::error naming the part at
// fault (an unknown name, a value that is not a positive number or size,
// a missing iops or bandwidth).
device_profile parse_device_profile(const std::string& text);
// The text form (parse_device_profile reads it back).
std::string device_profile_text(const device_profile& p);
// The built-in profile (defaults.hpp), saying `why` it stands in.
device_profile default_device_profile(const std::string& why);

// The key of the storage holding `path`: its file system's device number
// ("dev-MAJOR-MINOR"). Throws when the path cannot be stat'ed.
std::string device_key(const std::string& path);

struct device_profile_options {
  std::string given;          // text form; wins over everything else
  bool remeasure = false;     // probe even if a cached profile exists (and replace it)
  double probe_seconds = 1.0; // the probe's time, split between random and sequential reads
  std::string cache_dir;      // empty: $XDG_CACHE_HOME/deepwell/device-profiles (else ~/.cache/...)
};

// The profile for the storage under `path`: given (options, else
// DEEPWELL_DEVICE_PROFILE), cached, measured on `path` (and cached), or
// the defaults with the reason in `note`. Throws only for a given profile
// that does not parse (naming where it came from); a probe that fails or a
// cache that cannot be written is said in `note`.
device_profile device_profile_for(const std::string& path, const device_profile_options& o = {});

// The probe itself: O_DIRECT reads of `path` (at least 64 MiB), random
// 4 KiB reads from 64 threads, then 8 MiB sequential reads from 8. Throws
// deepwell::error saying why it cannot measure (no O_DIRECT on this file
// system, a file too small).
device_profile measure_device(const std::string& path, double seconds);

}  // namespace deepwell
