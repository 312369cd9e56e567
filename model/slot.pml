/* The pin-free validated read of a cache slot (page_cache_ref::read_hit,
 * detail/cache/fill.hpp) against eviction and refill of the same slot.
 *
 * A reader wants one word of page K. It reads the slot's state word (valid,
 * evict, busy and the generation, in one load), then the slot's key and a
 * data word, then the state word again, and keeps the data only if the key
 * was K, the first state said valid and unclaimed, and the generation did
 * not change. It holds no pin, so nothing stops an evictor: the evictor
 * claims the slot (evict set and the generation raised in one atomic step),
 * takes the key away, fills the slot with another page word by word, and
 * publishes it; later it may bring page K back into the same slot (the ABA
 * case that the generation is for).
 *
 * With -DHINT the reader takes read_hit's first path instead: the page
 * hint (the generation a fill published, stored after the page is valid;
 * one entry shared by K and J, as pages that map to one hint entry share
 * it), then the key and a data word, then the state word once, keeping the
 * data only if the key was K, the slot valid, and the generation the
 * hint's. A hint is never cleared: it goes stale.
 *
 * With -DSEEN the reader keeps reading page K after a kept read, as
 * read_seen does for a thread walking one page: it remembers the
 * generation that read was checked against, and each later read is the key
 * and a data word, then the state word, kept only if the key was K, the
 * slot valid and the generation the remembered one (no first state read,
 * no hint). A failed read forgets it (the caller pins instead).
 *
 * Checked: every read the reader keeps holds page K's data. Spin explores
 * interleavings under sequential consistency; the fences that give the
 * real code that order are argued in fill.hpp, not checked here.
 *
 * Broken variants (model/check.sh runs them; each must fail):
 *   BROKEN_NO_GEN      no generation: the reader checks the state and key again
 *                      after the data instead (fails only by ABA: the slot
 *                      evicted, filled with J, evicted, and refilled with K)
 *   BROKEN_GEN_LATE    the generation is raised at publication, after the data
 *   BROKEN_NO_RECHECK  the reader does not read the state again after the data
 *   BROKEN_HINT_NO_KEY with HINT: the reader trusts the hint without the key
 *                      (J's fill left the hint)
 *   BROKEN_HINT_NO_GEN with HINT: the reader checks the key and valid but
 *                      not the hint's generation (fails by ABA, as above)
 *   BROKEN_SEEN_NO_GEN with SEEN: later reads check the key and valid but
 *                      not the remembered generation (ABA again)
 */

#define K 1
#define J 2
#ifndef CYCLES
#define CYCLES 3
#endif
#ifndef READS
#define READS 2
#endif

/* the state word */
bool valid = true;
bool evict = false;
bool busy = false;
byte gen = 0;
/* the slot's key and its page's data (two words: a reader reads one) */
byte key = K;
byte data[2] = K;
/* the page hint: the published generation + 1 (0: none); K is in at 0 */
byte hint = 1;

active proctype evictor() {
  byte c = 0;
  byte next;
  do
  :: c < CYCLES ->
     /* the claim: the CAS that sets evict, raising the generation */
     atomic {
       valid && !evict && !busy ->
       evict = true;
#ifndef BROKEN_NO_GEN
#ifndef BROKEN_GEN_LATE
       gen++
#endif
#endif
     }
     /* evict_claimed: out of the directory, key gone, no longer valid */
     key = 0;
     valid = false;
     /* claim_slot: busy for the fill, evict dropped */
     atomic { busy = true; evict = false };
     /* the fill, alternating pages (K, then J, then K again ...) */
     if
     :: (c % 2) == 0 -> next = J
     :: else -> next = K
     fi;
     data[0] = next;
     data[1] = next;
     key = next;
     /* publication: one release RMW */
     atomic {
       valid = true;
       busy = false;
#ifdef BROKEN_GEN_LATE
       gen++
#endif
     };
     /* the hint, stored after publication (release) */
     hint = gen + 1;
     c++
  :: else -> break
  od
}

active proctype reader() {
  byte r = 0;
  bool v1, e1, b1, v2, e2, b2;
  byte g1, g2, k, k2, w, i, h, sg;
  bool seen = false;
  do
  :: r < READS ->
     if
     :: i = 0
     :: i = 1
     fi;
#ifdef SEEN
     if
     :: seen ->
        if
        :: k = key; w = data[i]
        :: w = data[i]; k = key
        fi;
        atomic { v2 = valid; g2 = gen };
#ifdef BROKEN_SEEN_NO_GEN
        g2 = sg;
#endif
        if
        :: k == K && v2 && g2 == sg ->
           assert(w == K)
        :: else -> seen = false
        fi;
        r++;
        goto next
     :: else -> skip
     fi;
#endif
#ifdef HINT
     h = hint;
     /* the key and the data: two loads with no order between them */
     if
     :: k = key; w = data[i]
     :: w = data[i]; k = key
     fi;
     atomic { v2 = valid; g2 = gen };
#ifdef BROKEN_HINT_NO_KEY
     k = K;
#endif
#ifdef BROKEN_HINT_NO_GEN
     g2 = h - 1;
#endif
     if
     :: h != 0 && k == K && v2 && g2 == h - 1 ->
        assert(w == K);
        seen = true;
        sg = h - 1
     :: else -> skip
     fi;
     r++;
     goto next;
#endif
     atomic { v1 = valid; e1 = evict; b1 = busy; g1 = gen };
     k = key;
     w = data[i];
#if defined(BROKEN_NO_GEN)
     atomic { v2 = valid; e2 = evict; b2 = busy; g2 = g1 };
     k2 = key;
     v1 = v1 && v2 && !e2 && !b2 && k2 == K;
#elif !defined(BROKEN_NO_RECHECK)
     g2 = gen;
#else
     g2 = g1;
#endif
     if
     :: v1 && !e1 && !b1 && k == K && g1 == g2 ->
        assert(w == K);  /* kept: it must be page K's word */
        seen = true;
        sg = g1
     :: else -> skip     /* the slow path (pinned) takes over */
     fi;
     r++;
next:
     skip
  :: else -> break
  od
}
