// Options structures that say their own size (their first field, `size`,
// set by their dw_*_options_init): a caller built against another
// deepwell.h passes its own layout, and the library reads only what the
// caller has. The size must be at least the first layout that carried it
// (ABI 7: every later field is appended, so an older caller's missing
// fields keep the init's defaults) and, above this library's, the extra
// bytes must be 0: a field a newer caller set that this library would
// silently ignore is an error, as openat2(2)'s struct open_how treats it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cache_options_c.hpp"
#include "guarded.hpp"

namespace deepwell::capi {

// The largest size taken from a caller (a page: an absurd one is junk).
constexpr uint32_t sized_options_max = 4096;

// `in` read as a T of its own size into a T that `init` filled first.
// first_size: the size of T's first layout (ABI 7's), where T has grown
// since; nothing smaller is one.
template <class T>
T read_sized(const T* in, void (*init)(T*), const char* name, size_t first_size = sizeof(T)) {
  const uint32_t size = in->size;
  const std::string n = name;
  need(size != 0, n + ".size is 0: fill the options with " + n + "_init first");
  need(size >= first_size && size <= sized_options_max,
       n + ".size is " + std::to_string(size) + ", not a size of " + n + " (this library's is " + std::to_string(sizeof(T)) +
           "): fill the options with " + n + "_init");
  T out;
  init(&out);
  const size_t take = size < sizeof(T) ? size : sizeof(T);
  std::memcpy(static_cast<void*>(&out), in, take);
  const unsigned char* extra = reinterpret_cast<const unsigned char*>(in) + sizeof(T);
  for (size_t i = sizeof(T); i < size; ++i, ++extra)
    need(*extra == 0, n + " has fields this library does not know set (a size of " + std::to_string(size) + " against its " +
                          std::to_string(sizeof(T)) + "): deepwell.h is newer than libdeepwell_c.so");
  out.size = uint32_t(sizeof(T));
  return out;
}

// What a dw_*_open of a store starts with: the output cleared, the options
// read at the caller's size, a path, and a mode of OPEN (0) or CREATE (1),
// named as the caller's header names them.
template <class T, class Out>
T read_open_options(const T* op, Out** out, void (*init)(T*), const char* name, const char* open_mode,
                    const char* create_mode) {
  need(op != nullptr && out != nullptr, "null options or output pointer");
  *out = nullptr;
  const T o = read_sized(op, init, name);
  need(o.path != nullptr && *o.path, "no path");
  need(o.mode == 0 || o.mode == 1, std::string("mode must be ") + open_mode + " (0) or " + create_mode + " (1), not " +
                                       std::to_string(o.mode));
  return o;
}

// What every dw_*_options_init starts with: the whole struct zeroed, its
// size set, and its cache options filled from `base` (cache_options_c.hpp's
// init_c); each init then sets its own fields' defaults.
template <class T, class MakeBase>
void init_sized(T* o, MakeBase&& base) {
  std::memset(static_cast<void*>(o), 0, sizeof(*o));
  o->size = uint32_t(sizeof(*o));
  init_c(o->cache, static_cast<MakeBase&&>(base));
}

}  // namespace deepwell::capi
