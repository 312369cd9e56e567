// The checkpoint store's on-disk format: records, the manifest's encoding
// and the layout it implies (checkpoint_format.hpp).
#include "durable/checkpoint_format.hpp"

#include <algorithm>
#include <cstring>

#include "common/disk_header.hpp"

namespace deepwell::checkpoint_format {

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}
std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

std::string spec_text(const tensor_spec& t) {
  return "'" + t.name + "' (" + std::to_string(t.bytes) + " bytes, dtype '" + t.dtype + "', shape " +
         shape_text(t.shape) + ")";
}

void check_manifest_shape(const checkpoint_manifest& m) {
  if (m.size() > max_buffers) throw error("checkpoint manifest: " + std::to_string(m.size()) + " buffers (at most " + std::to_string(max_buffers) + ")");
  std::map<std::string, size_t> seen;
  constexpr uint64_t max_store_bytes = uint64_t(1) << 56;  // 64 PiB: room for alignment, tables and both slots
  uint64_t total = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const tensor_spec& t = m[i];
    if (t.name.empty()) throw error("checkpoint manifest: buffer " + std::to_string(i) + " has an empty name");
    if (t.name.size() > max_name)
      throw error("checkpoint manifest: the name of buffer " + std::to_string(i) + " has " + std::to_string(t.name.size()) +
                  " bytes (at most " + std::to_string(max_name) + ")");
    if (t.dtype.size() > max_dtype)
      throw error("checkpoint manifest: the dtype of '" + t.name + "' has " + std::to_string(t.dtype.size()) +
                  " bytes (at most " + std::to_string(max_dtype) + ")");
    if (t.shape.size() > max_dims)
      throw error("checkpoint manifest: '" + t.name + "' has " + std::to_string(t.shape.size()) +
                  " dimensions (at most " + std::to_string(max_dims) + ")");
    if (!seen.emplace(t.name, i).second)
      throw error("checkpoint manifest: the name '" + t.name + "' appears twice (buffers " +
                  std::to_string(seen[t.name]) + " and " + std::to_string(i) + ")");
    for (int64_t d : t.shape)
      if (d < 0) throw error("checkpoint manifest: '" + t.name + "' has a negative dimension (" + std::to_string(d) + ")");
    // Sizes the layout adds up without wrapping (a store of 2^64 bytes
    // would otherwise come out small).
    if (t.bytes > max_store_bytes - total)
      throw error("checkpoint manifest: '" + t.name + "' (" + std::to_string(t.bytes) + " bytes) takes the buffers past " +
                  std::to_string(max_store_bytes) + " bytes in all");
    total += t.bytes;
  }
}



uint64_t buffer_align(uint64_t bytes, uint32_t unit) { return bytes >= unit ? unit : small_align; }

std::vector<uint8_t> encode_manifest(const checkpoint_manifest& m, const std::vector<uint64_t>& offsets) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  auto put32 = [&](uint32_t v) { put(&v, 4); };
  auto put64 = [&](uint64_t v) { put(&v, 8); };
  put(manifest_magic, 8);
  put32(format_version);
  put32(uint32_t(m.size()));
  put64(0);
  for (size_t i = 0; i < m.size(); ++i) {
    const tensor_spec& t = m[i];
    put32(uint32_t(t.name.size()));
    put32(uint32_t(t.dtype.size()));
    put32(uint32_t(t.shape.size()));
    put32(0);
    put64(t.bytes);
    put64(offsets[i]);
    put(t.name.data(), t.name.size());
    put(t.dtype.data(), t.dtype.size());
    out.resize(round_up(out.size(), 8), 0);
    for (int64_t d : t.shape) put64(uint64_t(d));
  }
  return out;
}

layout make_layout(const checkpoint_manifest& m, uint32_t unit) {
  layout l;
  uint64_t at = 0;
  for (const tensor_spec& t : m) {
    at = round_up(at, buffer_align(t.bytes, unit));
    l.offset.push_back(at);
    l.first_unit.push_back(l.units);
    l.units += units_of(t.bytes, unit);
    at += t.bytes;
  }
  l.data_bytes = at;
  l.table_offset = round_up(at, unit);
  l.table_bytes = table_header_size + l.units * 8;
  l.slot_stride = round_up(l.table_offset + l.table_bytes, region);
  l.manifest_bytes = encode_manifest(m, l.offset).size();
  l.slot_offset[0] = l.manifest_offset + round_up(l.manifest_bytes, region);
  l.slot_offset[1] = l.slot_offset[0] + l.slot_stride;
  l.store_bytes = l.slot_offset[1] + l.slot_stride;
  return l;
}

// Parses a manifest image (bounds-checked: it comes from a disk). Returns
// the manifest and each buffer's recorded offset, or throws with why.
checkpoint_manifest decode_manifest(const std::vector<uint8_t>& img, std::vector<uint64_t>& offsets) {
  size_t at = 0;
  auto take = [&](void* p, size_t n) {
    if (img.size() - at < n) throw error("it ends early, at byte " + std::to_string(at));
    std::memcpy(p, img.data() + at, n);
    at += n;
  };
  auto get32 = [&] {
    uint32_t v;
    take(&v, 4);
    return v;
  };
  auto get64 = [&] {
    uint64_t v;
    take(&v, 8);
    return v;
  };
  char magic[8];
  take(magic, 8);
  if (std::memcmp(magic, manifest_magic, 8) != 0) throw error("bad magic");
  const uint32_t version = get32();
  if (version != format_version) throw error("format version " + std::to_string(version));
  const uint32_t n = get32();
  if (n > max_buffers) throw error(std::to_string(n) + " buffers");
  (void)get64();
  checkpoint_manifest m(n);
  offsets.assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t name_len = get32(), dtype_len = get32(), ndim = get32();
    (void)get32();
    if (name_len == 0 || name_len > max_name || dtype_len > max_dtype || ndim > max_dims)
      throw error("entry " + std::to_string(i) + " has impossible lengths");
    m[i].bytes = get64();
    offsets[i] = get64();
    m[i].name.resize(name_len);
    take(m[i].name.data(), name_len);
    m[i].dtype.resize(dtype_len);
    take(m[i].dtype.data(), dtype_len);
    at = round_up(at, 8);
    if (at > img.size()) throw error("it ends early");
    m[i].shape.resize(ndim);
    for (uint32_t d = 0; d < ndim; ++d) m[i].shape[d] = int64_t(get64());
  }
  return m;
}

uint64_t header_checksum(const sb_header& h) { return hash_of(&h, offsetof(sb_header, checksum), seed_header); }

bool is_blank(const uint8_t* raw) {
  return std::all_of(raw, raw + header_size, [](uint8_t b) { return b == 0; });
}

// Why a raw superblock copy is not valid, or "" if it is.
std::string header_problem(const uint8_t* raw, uint32_t position, sb_header& h) {
  std::memcpy(&h, raw, sizeof h);
  if (is_blank(raw)) return "blank";
  if (!detail::magic_matches(h, sb_magic)) return "bad magic (not a deepwell checkpoint superblock)";
  if (h.checksum != header_checksum(h)) return "checksum mismatch (torn or overwritten)";
  if (h.version != format_version)
    return "format version " + std::to_string(h.version) + " (this library reads version " +
           std::to_string(format_version) + ")";
  if (h.header_bytes != header_size) return "header of " + std::to_string(h.header_bytes) + " bytes";
  if (h.copy != position) return "says it is copy " + std::to_string(h.copy);
  if (h.generation == 0 ? position != 0 : (h.generation % 2 != position || h.slot != position))
    return "generation " + std::to_string(h.generation) + " in the wrong copy or slot";
  if (h.region_bytes != region) return "region size " + std::to_string(h.region_bytes);
  return "";
}

}  // namespace deepwell::checkpoint_format
