// dw_array_options' arrays of drives (array_members.hpp).
#include "array_members.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <vector>

#include "deepwell/targets/drive_array.hpp"
#include "cache_options_c.hpp"
#include "guarded.hpp"

namespace deepwell::capi {
namespace {

const char* layout_name(int32_t layout) { return layout == DW_LAYOUT_STRIPE ? "stripe" : "mirror"; }

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Bytes each member needs for a dataset of `bytes`: a stripe's share in
// whole chunks, a mirror's all of it (whole 4 KiB blocks, as a single
// file's new dataset has).
uint64_t member_bytes(const dw_array_options& o, uint64_t bytes) {
  if (o.layout == DW_LAYOUT_MIRROR) return round_up(bytes, 4096);
  const uint64_t per_round = o.chunk_bytes * o.member_count;
  return (bytes + per_round - 1) / per_round * o.chunk_bytes;
}

}  // namespace

uint32_t array_options_first_size() { return uint32_t(offsetof(dw_array_options, members)); }

void check_layout(const dw_array_options& o, bool server) {
  const bool any_member = o.members != nullptr || o.member_count != 0;
  need(o.layout == DW_LAYOUT_SINGLE || o.layout == DW_LAYOUT_STRIPE || o.layout == DW_LAYOUT_MIRROR,
       "layout " + std::to_string(o.layout) + " is none of DW_LAYOUT_SINGLE, DW_LAYOUT_STRIPE and DW_LAYOUT_MIRROR");
  if (o.layout == DW_LAYOUT_SINGLE) {
    need(!any_member, "members are set but layout is DW_LAYOUT_SINGLE: say DW_LAYOUT_STRIPE or DW_LAYOUT_MIRROR");
    need(o.chunk_bytes == 0, "chunk_bytes applies to a stripe only (layout is DW_LAYOUT_SINGLE)");
    return;
  }
  const std::string kind = layout_name(o.layout);
  need(!server, "a " + kind + ": a server's arrays are declared in its config (stripe = [...], mirror = [...]); "
                "open the dataset by its name");
  need(o.path == nullptr, "a " + kind + " names its files in members: path must be NULL");
  need(o.member_count > 0 && o.members != nullptr, "a " + kind + " with no members (member_count " +
                                                       std::to_string(o.member_count) + ", members " +
                                                       (o.members ? "set" : "NULL") + ")");
  need(o.member_count <= 64, "a " + kind + " of " + std::to_string(o.member_count) + " members: at most 64");
  for (uint32_t i = 0; i < o.member_count; ++i)
    need(o.members[i] != nullptr && o.members[i][0] != 0, "member " + std::to_string(i) + " of the " + kind +
                                                               " has no path");
  need(o.offset == 0, "offset does not apply to a " + kind + " (its members hold the dataset from their start)");
  if (o.layout == DW_LAYOUT_MIRROR) {
    need(o.chunk_bytes == 0, "chunk_bytes applies to a stripe only, not a mirror");
  } else {
    const uint64_t c = o.chunk_bytes ? o.chunk_bytes : default_stripe_chunk;
    need(c >= 512 && c <= max_stripe_chunk && (c & (c - 1)) == 0,
         "chunk_bytes (" + std::to_string(c) + ") must be a power of two from 512 bytes to 64 MiB");
  }
}

std::shared_ptr<target> open_array_target(const dw_array_options& given, bool& created) {
  dw_array_options o = given;
  if (o.layout == DW_LAYOUT_STRIPE && o.chunk_bytes == 0) o.chunk_bytes = default_stripe_chunk;
  const std::string kind = layout_name(o.layout);
  file_options fo;
  fo.direct = o.cache.odirect != 0;
  fo.writable = o.writable != 0;
  fo.create = o.create != 0;
  fo.create_size = o.create ? member_bytes(o, o.create_bytes) : 0;
  created = o.create != 0;
  std::vector<std::shared_ptr<target>> members;
  {
    std::vector<std::string> paths;
    for (uint32_t i = 0; i < o.member_count; ++i) paths.push_back(o.members[i]);
    try {
      check_distinct_members(paths, kind);
    } catch (const error& e) {
      throw api_error(DW_EINVAL, e.what());
    }
  }
  // create makes the members that are missing; one that is there is opened
  // as it is, never grown. The ones made here go again if the open fails.
  std::vector<std::string> made;
  try {
    for (uint32_t i = 0; i < o.member_count; ++i) {
      const std::string path = o.members[i];
      const bool missing = access(path.c_str(), F_OK) != 0;
      created = created && missing;
      file_options mo = fo;
      mo.create = fo.create && missing;
      try {
        members.push_back(open_file_target(path, mo));
      } catch (const error& e) {
        throw api_error(DW_EIO, "member " + std::to_string(i) + " of the " + kind + ": " + e.what());
      }
      if (mo.create) made.push_back(path);
      need(!fo.create || members[i]->size() >= fo.create_size,
           "member " + std::to_string(i) + " of the " + kind + ", " + members[i]->describe() + ", holds " +
               std::to_string(members[i]->size()) + " bytes, fewer than the " + std::to_string(fo.create_size) +
               " its share of the rows asked for (shape) needs; create makes a missing file and does not grow one "
               "that is there");
      // Members alike: a larger one's extra bytes would be silently unused.
      need(members[i]->size() == members[0]->size(),
           "the " + kind + "'s members differ in size: " + members[0]->describe() + " has " +
               std::to_string(members[0]->size()) + " bytes, " + members[i]->describe() + " " +
               std::to_string(members[i]->size()) + " (an array's members must be alike)");
    }
  } catch (...) {
    members.clear();
    for (const std::string& p : made) ::unlink(p.c_str());
    throw;
  }
  if (o.layout == DW_LAYOUT_MIRROR) return make_mirrored_target(std::move(members));
  return make_striped_target(std::move(members), o.chunk_bytes);  // throws naming a chunk a member cannot take
}

std::string array_key(const dw_array_options& o) {
  const uint64_t chunk = o.layout == DW_LAYOUT_STRIPE && o.chunk_bytes == 0 ? default_stripe_chunk : o.chunk_bytes;
  std::string k = std::string(layout_name(o.layout)) + ":" + std::to_string(chunk) + ":";
  for (uint32_t i = 0; i < o.member_count; ++i) {
    struct stat st{};
    if (::stat(o.members[i], &st) != 0) return {};
    k += std::to_string(st.st_dev) + "/" + std::to_string(st.st_ino) + ":";
  }
  return k + std::to_string(o.length) + ":" + cache_key(o.cache, true);
}

}  // namespace deepwell::capi
