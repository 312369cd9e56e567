#include "targets/section_target.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/checksummed_target.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/targets/io_engine.hpp"

namespace deepwell::detail {

namespace {

std::string range_text(uint64_t offset, uint64_t bytes) {
  return "bytes " + std::to_string(offset) + "+" + std::to_string(bytes);
}

bool inside(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

bool apart(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) { return a + an <= b || b + bn <= a; }

// `bytes` at `offset` of t into `out`, synchronously (on an engine of our own).
void read_now(target& t, uint64_t offset, uint64_t bytes, void* out_bytes) {
  auto* out = static_cast<uint8_t*>(out_bytes);
  auto io = make_io_engine(io_backend::automatic, 4);
  const uint32_t align = std::max<uint32_t>({t.memory_alignment(), t.io_alignment(), 4096});
  constexpr uint32_t chunk = 1u << 20;
  struct freer {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, freer> buf(static_cast<uint8_t*>(std::aligned_alloc(align, chunk + align)));
  if (!buf) throw std::bad_alloc();
  // Whole aligned blocks around [offset, offset + bytes).
  const uint64_t first = offset / align * align;
  const uint64_t end = offset + bytes;
  for (uint64_t at = first; at < end; at += chunk) {
    const uint32_t n = uint32_t(std::min<uint64_t>(chunk, (end - at + align - 1) / align * align));
    int64_t got = INT64_MIN;
    auto cb = [](void* ctx, int64_t res) { *static_cast<int64_t*>(ctx) = res; };
    t.read(*io, buf.get(), n, at, {cb, &got});
    while (got == INT64_MIN) {
      io->wait(1'000'000'000);
      io->reap();
    }
    if (got < 0) throw error("reading " + range_text(at, n) + " of " + t.describe() + ": " + std::strerror(int(-got)));
    const uint64_t from = std::max(at, offset), to = std::min(at + n, end);
    if (from < to) std::memcpy(out + (from - offset), buf.get() + (from - at), to - from);
  }
}

}  // namespace

void check_section_request(const target& dataset, const section_request& r) {
  const uint64_t size = dataset.size();
  const std::string where = range_text(r.offset, r.bytes) + " of " + dataset.describe();
  if (r.bytes == 0) throw error("section " + where + ": a section has at least one byte");
  if (!inside(r.offset, r.bytes, size))
    throw error("section " + where + " is not inside the dataset (" + std::to_string(size) + " bytes)");
  const uint32_t bs = r.block_size;
  if (bs < 512 || bs > 65536 || (bs & (bs - 1)) != 0)
    throw error("section " + where + ": block size " + std::to_string(bs) +
                " is not a power of two from 512 to 65536");
  if (r.writable && !dataset.writable()) throw error("section " + where + ": the dataset is read-only");
  if (dataset.io_alignment() > 1 && bs % dataset.io_alignment() != 0)
    throw error("section " + where + ": block size " + std::to_string(bs) + " is not a multiple of the dataset's " +
                "I/O alignment " + std::to_string(dataset.io_alignment()));
  if (r.sums == sums_kind::none) return;
  if (r.sums != sums_kind::fixed && r.sums != sums_kind::kept)
    throw error("section " + where + ": unknown kind of sums " + std::to_string(int(r.sums)));
  const std::string sums_where = range_text(r.sums_offset, r.sums_bytes);
  if (!inside(r.sums_offset, r.sums_bytes, size))
    throw error("section " + where + ": its sums at " + sums_where + " are not inside the dataset");
  if (!apart(r.offset, r.bytes, r.sums_offset, r.sums_bytes))
    throw error("section " + where + ": its sums at " + sums_where + " overlap its data");
  if (r.sums == sums_kind::fixed) {
    if (r.writable) throw error("section " + where + ": fixed sums are for read-only data");
    if (r.sum_block != file_sum_block)
      throw error("section " + where + ": fixed sums cover " + std::to_string(file_sum_block) + "-byte blocks, not " +
                  std::to_string(r.sum_block));
    const uint64_t count = section_sum_count(r.bytes);
    if (r.sums_bytes < count * 4)
      throw error("section " + where + ": " + std::to_string(count) + " blocks need " + std::to_string(count * 4) +
                  " bytes of sums, not " + std::to_string(r.sums_bytes));
    return;
  }
  const uint32_t sb = r.sum_block;
  if (sb < 512 || sb > (1u << 20) || (sb & (sb - 1)) != 0)
    throw error("section " + where + ": a sum's block of " + std::to_string(sb) +
                " bytes is not a power of two from 512 to 1 MiB");
  // Kept sums' block is the section's I/O unit: the namespace's block holds whole ones.
  if (bs % sb != 0)
    throw error("section " + where + ": block size " + std::to_string(bs) + " is not a multiple of the sums' block " +
                std::to_string(sb));
  if (r.sums_bytes < checksum_region_bytes(r.bytes, sb))
    throw error("section " + where + ": its sums need " + std::to_string(checksum_region_bytes(r.bytes, sb)) +
                " bytes, more than the " + std::to_string(r.sums_bytes) + " given");
}

std::shared_ptr<target> make_section_target(const std::shared_ptr<target>& dataset, const section_request& r) {
  if (!dataset) throw error("section: no dataset");
  check_section_request(*dataset, r);
  std::shared_ptr<target> data = make_slice_target(dataset, r.offset, r.bytes, r.writable);
  if (r.sums == sums_kind::none) return data;
  if (r.sums == sums_kind::fixed) {
    std::vector<uint32_t> sums(section_sum_count(r.bytes));
    read_now(*dataset, r.sums_offset, sums.size() * 4, sums.data());
    return checked_section(std::move(data), sums);
  }
  return make_checksummed_target(std::move(data), make_slice_target(dataset, r.sums_offset, r.sums_bytes, r.writable),
                                 r.sum_block);
}

section_checks section_target_checks(const target& t) {
  section_checks c;
  if (const auto* s = dynamic_cast<const checksummed_target*>(&t)) {
    c.mismatches = s->mismatches();
    c.last_bad_block = s->last_mismatch_block();
  }
  return c;
}

void section_target_verify(target& t, bool on) {
  if (auto* s = dynamic_cast<checksummed_target*>(&t)) s->set_verify(on);
}

}  // namespace deepwell::detail
