/*
 * A spin model of deepwell's queue protocol (include/deepwell/queue.hpp and
 * the controller's loop in src/controller/controller.cpp), small enough to
 * check exhaustively: one queue pair of N entries, CLIENTS client threads
 * sharing it, each sending K commands, and a controller that completes
 * commands in any order (NVMe may reorder).
 *
 * Checked: no command id is outstanding twice; no completion is delivered
 * twice or for an id that is not waiting; every command completes (a lost
 * completion or a stuck submission ends in an invalid end state); the
 * controller never posts into a CQ slot the client has not consumed.
 *
 * spin interleaves atomic steps under sequential consistency: it checks the
 * protocol's logic, not memory ordering (that is ThreadSanitizer's and the
 * GPU stress tests' job). Broken variants (model/check.sh) must fail:
 *   BROKEN_NO_CQ_ROOM      the controller posts without checking CQ room (with GREEDY)
 *   BROKEN_RING_EARLY      the doorbell covers a slot before its command is written
 *   BROKEN_RELEASE_EARLY   a client frees its id before consuming the completion
 *   BROKEN_PHASE           the poller ignores the phase flip when the CQ wraps
 * GREEDY gives the clients N + 1 command ids, more than the CQ holds: the
 * controller's CQ room check must still keep every completion (it waits).
 */

#ifndef N
#define N 4            /* SQ and CQ entries */
#endif
#ifdef GREEDY
#define DEPTH (N + 1)  /* a misbehaving client: more ids than the CQ has entries */
#else
#define DEPTH (N - 1)  /* command ids */
#endif
#ifndef CLIENTS
#define CLIENTS 2
#endif
#ifndef K
#define K 3
#endif
#define TOTAL (CLIENTS * K)

/* shared with the controller (single writer each) */
byte sq_cid[N];            /* the command's id, written by the submitter */
byte sq_tail_doorbell;     /* client writes */
byte cq_head_doorbell;     /* client writes */
byte cq_cid[N];            /* controller writes */
bit  cq_phase[N];          /* controller writes, last */

/* client memory */
byte sq_ticket;            /* next ticket (atomic add) */
byte sq_tail;              /* tickets published (monotonic) */
bit  sq_lock;
byte ready[N];             /* ticket + 1 once the slot's command is written */
bit  cq_lock;
byte cq_head;              /* completions consumed (monotonic) */
byte slot[DEPTH];          /* 0 pending, 1 done */
chan pool = [DEPTH] of { byte };

/* ghost state for the checks */
bit  outstanding[DEPTH];   /* ids between fetch and completion */
bit  waiting[DEPTH];       /* ids a client is waiting on */
bit  unconsumed[N];        /* a posted completion the client has not read yet */
byte completed;

inline try_poll() {
  atomic { if :: cq_lock == 0 -> cq_lock = 1 :: else -> goto poll_done fi }
  do
#ifdef BROKEN_PHASE
  :: cq_phase[cq_head % N] == 1 ->
#else
  :: cq_phase[cq_head % N] == ((cq_head / N) % 2 == 0 -> 1 : 0) ->
#endif
     byte c = cq_cid[cq_head % N];
     assert(waiting[c] && slot[c] == 0);   /* delivered once, to a waiter */
     slot[c] = 1;
     unconsumed[cq_head % N] = 0;
     c = 0;
     cq_head++;
     cq_head_doorbell = cq_head % N
  :: else -> break
  od;
  cq_lock = 0;
poll_done: skip
}

inline publish_until(t) {
  do
  :: sq_tail > t -> break
  :: else ->
     atomic { if :: sq_lock == 0 -> sq_lock = 1 :: else -> goto not_mine fi }
     byte e = sq_tail;
     do
     :: ready[e % N] == e + 1 -> e++
     :: else -> break
     od;
     if
     :: e != sq_tail -> sq_tail_doorbell = e % N; sq_tail = e
     :: else -> skip
     fi;
     e = 0;
     sq_lock = 0;
not_mine: skip
  od
}

proctype client() {
  byte k = 0, cid, t;
  do
  :: k == K -> break
  :: else ->
     /* acquire an id, polling completions meanwhile (they free ids) */
     do
     :: pool ? [cid] -> pool ? cid; break
     :: empty(pool) ->
#ifndef BROKEN_NO_POLL_IN_ACQUIRE
        try_poll()
#else
        skip
#endif
     od;
     waiting[cid] = 1;
     /* submit: ticket, command, ready mark, publish */
     atomic { t = sq_ticket; sq_ticket++ }
#ifdef BROKEN_RING_EARLY
     sq_tail_doorbell = (t + 1) % N;
#endif
     sq_cid[t % N] = cid;
     ready[t % N] = t + 1;
     publish_until(t);
#ifdef BROKEN_RELEASE_EARLY
     pool ! cid;
#endif
     /* wait: consume from our slot, or take a turn as poller */
     do
     :: slot[cid] == 1 -> slot[cid] = 0; break
     :: else -> try_poll()
     od;
     waiting[cid] = 0;
#ifndef BROKEN_RELEASE_EARLY
     pool ! cid;
#endif
     k++
  od
}

proctype controller() {
  byte sq_head = 0, cq_tail = 0, inflight = 0, c, i;
  byte pending[DEPTH];     /* fetched, not yet completed: any may complete next */
  byte npending = 0;
  do
  :: completed == TOTAL -> break
  /* fetch one command if the client published it and the CQ will have room */
  :: sq_head % N != sq_tail_doorbell && inflight < N - 1 ->
     c = sq_cid[sq_head % N];
     assert(c < DEPTH && !outstanding[c]);   /* ids are unique among outstanding commands */
     outstanding[c] = 1;
     pending[npending] = c; npending++;
     sq_head++; inflight++
  /* complete any fetched command, if the CQ has room */
  :: npending > 0 &&
#ifndef BROKEN_NO_CQ_ROOM
     (cq_tail + 1) % N != cq_head_doorbell &&
#endif
     true ->
     /* choose which: NVMe completes in any order */
     i = 0;
     do
     :: i < npending - 1 -> i++
     :: true -> break
     od;
     c = pending[i];
     pending[i] = pending[npending - 1]; npending--;
     assert(!unconsumed[cq_tail % N]);  /* never overwrite an unconsumed entry */
     outstanding[c] = 0;
     cq_cid[cq_tail % N] = c;
     unconsumed[cq_tail % N] = 1;
     cq_phase[cq_tail % N] = ((cq_tail / N) % 2 == 0 -> 1 : 0);
     cq_tail++; inflight--; completed++
  od
}

init {
  byte i;
  atomic {
    for (i : 0 .. DEPTH - 1) { pool ! i }
    for (i : 1 .. CLIENTS) { run client() }
    run controller()
  }
}
