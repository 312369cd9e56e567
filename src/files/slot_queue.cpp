// The host's part of the free-slot queue: its memory and first state.
#include "deepwell/files/slot_queue.hpp"

#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/files/client_memory.hpp"

namespace deepwell {

slot_queue_ref make_slot_queue(client_memory& mem, uint32_t nslots, uint32_t cell_shift) {
  if (nslots == 0 || nslots > (1u << 20))
    throw error("slot queue: " + std::to_string(nslots) + " slots is outside 1 to 1048576");
  if (cell_shift > 24 || (cell_shift && (1u << cell_shift) < nslots))
    throw error("slot queue: 2^" + std::to_string(cell_shift) + " cells for " + std::to_string(nslots) + " slots");
  slot_queue_ref q;
  q.nslots = nslots;
  // Cells for every slot and many waiters: more waiters than cells is
  // correct too (later laps wait for earlier ones), just slower to leave.
  q.cell_shift = cell_shift;
  if (!cell_shift) {
    q.cell_shift = 14;
    while ((1u << q.cell_shift) < 4 * nslots) ++q.cell_shift;
  }
  q.ncells = 1u << q.cell_shift;
  q.head = static_cast<unsigned long long*>(mem.alloc_private(2 * sizeof(unsigned long long)));
  q.tail = q.head + 1;
  q.cells = static_cast<unsigned long long*>(mem.alloc_private(sizeof(unsigned long long) * q.ncells));
  q.abandoned = static_cast<uint32_t*>(mem.alloc_private(sizeof(uint32_t) * (nslots + 1)));
  q.abandoned_count = q.abandoned + nslots;
  // Every slot free: queued in lap 0's first cells, producers start after
  // them. The rest of the memory is zero: lap 0, empty.
  std::vector<unsigned long long> first(nslots);
  for (uint32_t i = 0; i < nslots; ++i) first[i] = slot_queue_ref::initial_cell(i);
  mem.write_private(q.cells, first.data(), sizeof(unsigned long long) * nslots);
  const unsigned long long tail = nslots;
  mem.write_private(q.tail, &tail, sizeof tail);
  return q;
}

}  // namespace deepwell
