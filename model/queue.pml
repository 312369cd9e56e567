/*
 * A spin model of deepwell's queue protocol (include/deepwell/link/queue.hpp and
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
 *
 * Extensions (the writes issue):
 *   M=2         a client may have two commands outstanding (it takes the
 *               second id only if one is free now: no hold-and-wait)
 *   TIMEOUTS=n  up to n waits end at their "deadline" (any time): a read's
 *               id is abandoned and freed by the poller when its completion
 *               arrives; a write of the page keeps its id and the page's
 *               write-back token (an orphan) until some client reaps the
 *               completion, so two writes of the page are never in flight
 *   WRITES      every command is a write of one shared page (takes the
 *               page's write-back token first)
 *   STOP        the controller may stop at any point: what it fetched and
 *               fetches completes (aborted), then the queue is marked
 *               stopped; clients end their waits with "lost" and no client
 *               hangs
 *   BROKEN_ABANDON_WRITE  a timed-out write abandons its id and drops the
 *               token (the old defect): two writes of the page in flight
 */
#ifndef M
#define M 1
#endif
#ifndef TIMEOUTS
#define TIMEOUTS 0
#endif
#define NONE 255

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
byte slot[DEPTH];          /* 0 pending, 1 done, 2 abandoned (the poller frees the id) */
chan pool = [DEPTH] of { byte };
byte timeouts_left = TIMEOUTS;
bit  wb;                   /* the page's write-back token (the cache's writeback bit) */
byte orphan = NONE;        /* a timed-out write's id, kept with the token until reaped */
bit  stopped;              /* queue state: the controller stopped (clients see "lost") */
byte sq_w[N];              /* 1: the command is a write of the page */

/* ghost state for the checks */
bit  outstanding[DEPTH];   /* ids between fetch and completion */
bit  waiting[DEPTH];       /* ids a client is waiting on */
bit  unconsumed[N];        /* a posted completion the client has not read yet */
byte completed;
bit  owned[DEPTH];         /* taken from the pool and not yet returned */
byte writes_out;           /* writes of the page fetched and not completed */

inline try_poll() {
  atomic { if :: cq_lock == 0 -> cq_lock = 1 :: else -> goto poll_done fi }
  do
#ifdef BROKEN_PHASE
  :: cq_phase[cq_head % N] == 1 ->
#else
  :: cq_phase[cq_head % N] == ((cq_head / N) % 2 == 0 -> 1 : 0) ->
#endif
     byte c = cq_cid[cq_head % N];
     assert(owned[c] && slot[c] != 1);   /* delivered once, to an id someone holds */
     if
     :: slot[c] == 2 -> slot[c] = 0; owned[c] = 0; pool ! c   /* its waiter gave up: free only now */
     :: else -> slot[c] = 1
     fi;
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

/* takes an id from the pool, polling meanwhile (completions free ids);
   gives up (goto lost) once the queue stopped */
inline acquire(cid) {
  do
  :: atomic { pool ? [cid] -> pool ? cid }; owned[cid] = 1; break
  :: empty(pool) && stopped -> goto lost
  :: empty(pool) && !stopped ->
#ifndef BROKEN_NO_POLL_IN_ACQUIRE
     try_poll();
#endif
     reap()
  od
}

/* a timed-out write left in flight: whoever sees its completion settles it */
inline reap() {
  atomic { if :: orphan != NONE && slot[orphan] == 1 -> rc = orphan; orphan = NONE :: else -> rc = NONE fi }
  if
  :: rc != NONE -> slot[rc] = 0; owned[rc] = 0; pool ! rc; wb = 0; rc = NONE
  :: else -> skip
  fi
}

inline submit(cid, w) {
  waiting[cid] = 1;
  atomic { t = sq_ticket; sq_ticket++ }
#ifdef BROKEN_RING_EARLY
  sq_tail_doorbell = (t + 1) % N;
#endif
  sq_cid[t % N] = cid;
  sq_w[t % N] = w;
  ready[t % N] = t + 1;
  publish_until(t);
#ifdef BROKEN_RELEASE_EARLY
  owned[cid] = 0;
  pool ! cid;
#endif
}

/* waits for cid: consume from its slot, or take a turn as poller; may time
   out (TIMEOUTS) or find the queue stopped */
inline wait(cid, w) {
  do
  :: slot[cid] == 1 -> slot[cid] = 0; waiting[cid] = 0;
#ifndef BROKEN_RELEASE_EARLY
     owned[cid] = 0; pool ! cid;
#endif
     if :: w -> wb = 0 :: else -> skip fi;
     break
  :: slot[cid] == 0 && !stopped -> try_poll()
  :: slot[cid] == 0 && (stopped || timeouts_left > 0) ->
     if :: !stopped -> timeouts_left-- :: else -> try_poll() fi;
     waiting[cid] = 0;
     if
     :: slot[cid] == 1 -> skip   /* it arrived meanwhile: taken next round */
     :: else ->
#ifdef BROKEN_ABANDON_WRITE
        atomic { if :: slot[cid] == 0 -> slot[cid] = 2 :: else -> skip fi }
        if :: w -> wb = 0 :: else -> skip fi;
#else
        if
        :: w -> orphan = cid   /* keeps the id and the token until reaped */
        :: else -> atomic { if :: slot[cid] == 0 -> slot[cid] = 2 :: else -> skip fi }
        fi;
#endif
        break
     fi
  od
}

proctype client() {
  byte k = 0, c1, c2, t, rc = NONE;
  bit has2, w = 0;
  do
  :: k >= K -> break
  :: else ->
#ifdef WRITES
     /* the page's write-back token: one write of a page in flight at a time */
     do
     :: atomic { wb == 0 -> wb = 1 }; break
     :: stopped -> goto lost
     :: !stopped -> try_poll(); reap()
     od;
     w = 1;
#endif
     acquire(c1);
     submit(c1, w);
     has2 = 0;
#if M > 1
     if
     :: atomic { !w && k + 1 < K && pool ? [c2] -> pool ? c2 }; owned[c2] = 1; has2 = 1; submit(c2, 0)
     :: else -> skip
     fi;
#endif
     wait(c1, w);
     if :: has2 -> wait(c2, 0) :: else -> skip fi;
     k = k + 1 + has2
  od;
lost: skip
}

proctype controller() {
  byte sq_head = 0, cq_tail = 0, inflight = 0, c, i;
  byte pending[DEPTH];     /* fetched, not yet completed: any may complete next */
  bit sq_w_of[DEPTH];      /* the fetched command of this id is a write */
  byte npending = 0;
  bit stopping = 0;
  do
  :: completed == TOTAL -> break
#ifdef STOP
  /* stop(): everything fetched completes (aborted), later commands too, then
     the queue is marked stopped */
  :: !stopping -> stopping = 1
  :: stopping && npending == 0 && sq_head % N == sq_tail_doorbell -> stopped = 1; break
#endif
  /* fetch one command if the client published it and the CQ will have room */
  :: sq_head % N != sq_tail_doorbell && inflight < N - 1 ->
     c = sq_cid[sq_head % N];
     assert(c < DEPTH && !outstanding[c]);   /* ids are unique among outstanding commands */
     outstanding[c] = 1;
     sq_w_of[c] = sq_w[sq_head % N];
     if
     :: sq_w[sq_head % N] -> assert(writes_out == 0); writes_out++   /* one write of the page in flight */
     :: else -> skip
     fi;
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
     if :: sq_w_of[c] -> writes_out--; sq_w_of[c] = 0 :: else -> skip fi;
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
