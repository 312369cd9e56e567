// The controller's arbiter of storage time between clients (server mode):
// per-client accounts of bytes in flight, weights and rate limits, shared
// by all pollers (lock-free on the command path, except a client's rate
// bucket). tenancy.hpp says what the shares mean.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "deepwell/controller/tenancy.hpp"

namespace deepwell::detail {

// A counter with one writing thread and any number of readers: a plain
// load and store, not a locked add (about ten of these a command).
struct single_writer_counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

// A client's counters as one poller keeps them: each poller writes only its
// own shard (a cache line apart), so pollers serving one client's queues do
// not pass lines back and forth on every command (the H100 machine: two to
// four pollers updating one client's shared atomics cost 230-500 ns a
// command, a sixth to a third of a page-cache read's whole cost).
struct alignas(64) client_counter_shard {
  single_writer_counter commands, reads, writes, flushes, bytes_read, bytes_written, errors, throttled;
  single_writer_counter latency_us[client_counters::latency_buckets];
  single_writer_counter latency_ns_sum;
  void record_latency(uint64_t ns);
  // The poller's scratch: commands of this client it took in its pass
  // number `pass` (a pass's quota per client, controller.cpp's fetch).
  uint64_t pass = 0;
  uint32_t pass_fetched = 0;
};

// Since when poller i's oldest command refused its client's share has
// waited (0: none waits). Poller i writes it (when it changes, and only
// while its queues wait); the others read it before they reserve, so that
// the poller whose command just finished does not take the freed room
// back before another poller's older waiter can (share_arbiter::
// older_waiter). `since` has a line of its own: the shard beside it changes
// with every command, while the other pollers read `since` before they
// reserve.
struct alignas(64) waiter_slot {
  std::atomic<uint64_t> since{0};
};

struct client_account {
  // `shards`: one per poller; shard(i) has one writer, poller i.
  explicit client_account(uint32_t id_, unsigned shards = 1)
      : id(id_),
        shard_count(shards ? shards : 1),
        shards_(std::make_unique<client_counter_shard[]>(shard_count)),
        waiters_(std::make_unique<waiter_slot[]>(shard_count)) {}
  const uint32_t id;
  std::atomic<uint64_t> weight_milli{1000};  // weight * 1000
  std::atomic<uint64_t> rate_bytes{0};
  std::atomic<uint32_t> queues{0};           // its queue pairs now (a queue's credit is a part of its share)
  // Bytes reserved and not given back: those of commands admitted and not
  // finished, and credit a queue keeps for its next commands.
  alignas(64) std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> demand{0};  // begin()s not yet finish()ed: commands, or queues with commands
  uint64_t active_weight = 0;       // what this account added to the arbiter's sum (guarded by its mutex)
  std::mutex rate_mutex;            // the token bucket
  int64_t tokens = 0;
  uint64_t refilled_ns = 0;
  const unsigned shard_count;

  // Poller i's shard (i < shard_count: the controller makes one per poller).
  client_counter_shard& shard(unsigned i) { return shards_[i]; }
  waiter_slot& waiter(unsigned i) { return waiters_[i]; }
  const waiter_slot& waiter(unsigned i) const { return waiters_[i]; }
  client_counters snapshot() const;

 private:
  std::unique_ptr<client_counter_shard[]> shards_;
  std::unique_ptr<waiter_slot[]> waiters_;
};

// The latency target (controller_config::latency_target): while two or
// more clients use the storage, the budget they share shrinks until the
// storage's latency is within `factor` of its floor, and grows back when it
// is (additive increase, multiplicative decrease, one step per window);
// with one client it returns to the whole budget, and goes above it while
// that pays: a lone client held back by the budget gets lone_growth times
// as much a window (up to lone_max times the budget) while the mean
// latency of its commands stays within `factor` of what it was at the
// budget (each namespace against its own), so the storage serves the extra
// in parallel rather than queueing it, and a client that comes finds at
// most that much more latency ahead
// of it (the budget drops back the moment a second client is active). A
// try queued when two windows in a row were over: one window's mean is
// noisy, and a client whose growth a single slow window undid spent most
// of its time at the budget (grep under the server: 4-16 MiB after runs
// where 64 MiB paid). It steps back and waits ten windows before the next
// try, twice as long after each further one, up to probe_every_ns.
// Each namespace has its
// own floor (a dataset in the page cache answers in microseconds, one on a
// disk in hundreds): the median latency of the commands admitted during a
// probe (every probe_every_ns under contention the budget drops to one
// command per client until each namespace used has probe_samples such
// commands done, or probe_ns passed): the storage's own latency, not its
// latency behind a backlog (only each client's first command in the probe
// waits behind the commands admitted before it). A median, not the fastest
// command: a virtual disk answers a few reads from its host's cache in
// 20 us among reads of 250 us, and a floor that low held every client to
// one command (seen on the H100 machine). A window's verdict is its worst
// namespace's: mean latency over factor * floor.
struct latency_target {
  double factor = 0;                     // 0: off (the budget is fixed)
  uint64_t window_ns = 10'000'000;       // 10 ms
  uint64_t probe_every_ns = 2'000'000'000;
  static constexpr uint32_t max_probe_samples = 15;
  uint32_t probe_samples = max_probe_samples;  // per namespace used during the probe, at most max_probe_samples
  uint64_t probe_ns = 100'000'000;       // a probe's end when not every namespace has its samples
  // How long the budget stays held after the last window with two clients:
  // a light client's misses come and go, and each return should not find
  // a full backlog in front of it.
  uint64_t hold_ns = 500'000'000;
  uint32_t lone_growth = 4;
  uint32_t lone_max = 64;
  uint32_t lone_samples = 16;  // commands a window needs for a lone client's verdict
};

class share_arbiter {
 public:
  // Namespaces 1..max_nsid get floors of their own (others are not timed).
  // `shards`: the pollers (each counts into its own shard of every account
  // and of the latency target's sums).
  explicit share_arbiter(uint64_t budget_bytes, latency_target lt = {}, uint32_t max_nsid = 1024, unsigned shards = 1);
  // The budget now (below the configured one while the latency target holds it back).
  uint64_t budget() const { return effective_.load(std::memory_order_relaxed); }
  uint64_t configured_budget() const { return budget_; }
  // The latency target's floor estimate for namespace `nsid` (0: none yet);
  // with nsid 0, the lowest of any namespace.
  uint64_t latency_floor_ns(uint32_t nsid = 0) const;
  // A read or write of namespace `nsid` done, `device_ns` after it was
  // admitted; `shard`: the poller that saw it (one thread per shard).
  // `read`: a read (a lone client's verdict weighs its reads apart).
  void completed(uint32_t nsid, uint64_t device_ns, uint64_t now_ns, unsigned shard = 0, bool read = true);
  // The account of `client`, made on first use with weight 1 and no rate cap.
  std::shared_ptr<client_account> account(uint32_t client);
  std::shared_ptr<client_account> find(uint32_t client) const;
  // Forgets `client`'s account (its connection ended): the queues that
  // still hold it keep it alive until the pollers drop them.
  void forget(uint32_t client);
  size_t account_count() const;
  void set_share(uint32_t client, const client_share& s);

  // One more of a's commands waits for admission or runs, until finish()ed:
  // the client counts as active while any do. (The controller counts a
  // queue with commands as one, begun when it takes its first command and
  // finished when it has none left.)
  void begin(client_account& a);
  // The bytes of a's share now (budget * weight / active weights).
  uint64_t allowed(const client_account& a) const;
  // Of `credit` bytes a busy queue of a's holds unused, what it should give
  // back: the part above its share of half a's share (the other half stays
  // free for whichever of a's queues needs it), or all of it while a is
  // over its share (another client became active, or the latency target
  // cut the budget).
  uint64_t excess_credit(const client_account& a, uint64_t credit) const;
  // Reserves bytes of a's share for commands about to start: `want` if the
  // share has room, else what it has if that is at least `cost` (a client
  // with nothing in flight always gets `cost`: no client starves); 0 when
  // not even `cost` fits. A poller reserves for the commands a queue has
  // waiting when the queue's credit runs short, not once a command.
  uint64_t reserve(client_account& a, uint64_t cost, uint64_t want);
  // Whether a poller other than `shard` has a command of a's that has
  // waited for the share since before `since` (by more than
  // waiter_grace_ns): the room that frees goes to the oldest waiter first,
  // whichever poller serves it. A share of one or two commands over many
  // queues otherwise went to the poller that freed it, again and again,
  // and the other poller's queues starved.
  bool older_waiter(const client_account& a, unsigned shard, uint64_t since) const;
  static constexpr uint64_t waiter_grace_ns = 10'000;
  // Whether a's rate cap allows a command of `cost` bytes now (and charges it).
  bool rate_allows(client_account& a, uint64_t cost, uint64_t now_ns);
  // Whether one command of `cost` bytes may start now (reserve and rate).
  bool try_admit(client_account& a, uint64_t cost, uint64_t now_ns);
  // `n` of what begin() counted are done, and `released` bytes of a's
  // reservations come back (finished commands', and credit not used).
  void finish(client_account& a, uint64_t n, uint64_t released);
  // The weights of the clients now active, * 1000.
  uint64_t active_weight() const { return active_weight_.load(std::memory_order_relaxed); }

 private:
  const uint64_t budget_;
  const latency_target target_;
  std::atomic<uint64_t> effective_;
  std::atomic<uint64_t> lone_backoff_ns_;  // the next wait after a try that queued
  std::atomic<uint64_t> active_weight_{0};
  // The latency sum and count for one namespace, as one poller keeps them:
  // running totals with one writer; a window's end takes the difference
  // from what it saw last (`seen_*`: the thread ending a window; atomics,
  // as a window's end can in principle overlap the next one's when a
  // thread is descheduled for longer than a window: a window counted
  // twice then, no more).
  struct window_sum {
    single_writer_counter sum, count;
    std::atomic<uint64_t> seen_sum{0}, seen_count{0};
    single_writer_counter read_sum, read_count;  // the reads among them
    std::atomic<uint64_t> seen_read_sum{0}, seen_read_count{0};
  };
  // Per namespace: its floor and the probe's samples.
  struct ns_latency {
    std::atomic<uint64_t> floor{0}, probe_count{0};
    // A lone client's mean latency at the budget (0: none yet), smoothed
    // over its windows there: one window's mean moves with the mix of
    // reads in it (a few from the host's cache, a few from the disk). Of
    // its reads, and of all its commands for windows with too few reads:
    // write-backs come in bursts whose latency says little of whether more
    // reads in flight run in parallel (grep's output files).
    std::atomic<uint64_t> lone_base{0}, lone_read_base{0};
    std::atomic<uint64_t> probe[latency_target::max_probe_samples] = {};
  };
  const uint32_t max_nsid_;
  const unsigned shards_;
  std::unique_ptr<ns_latency[]> ns_;
  // shards_ rows of max_nsid + 1, each row starting on its own cache lines.
  size_t row_;  // window_sums per row
  std::unique_ptr<window_sum[]> sums_;
  static void take_window(const single_writer_counter& count, const single_writer_counter& sum,
                          std::atomic<uint64_t>& seen_count, std::atomic<uint64_t>& seen_sum, uint64_t& c, uint64_t& s);
  window_sum& sum_of(unsigned shard, uint32_t nsid) { return sums_[shard * row_ + nsid]; }  // shard < shards_
  std::atomic<uint32_t> top_nsid_{0};  // the highest namespace timed so far
  // The latency target's window start; the clients active now and the most
  // active at once in it.
  std::atomic<uint64_t> window_start_{0};
  std::atomic<uint64_t> active_clients_{0}, window_peak_clients_{0};
  std::atomic<uint64_t> probed_at_{0}, resume_budget_{0}, contended_until_{0};
  // A reservation was refused since the last window's end (a client held
  // back by its share).
  std::atomic<bool> refused_{false};
  std::atomic<uint64_t> lone_retry_at_{0};  // no growth before (a try that queued)
  std::atomic<uint32_t> lone_strikes_{0};   // windows in a row above the budget that queued
  // The client the try state above belongs to: a try's history says how
  // one client's commands ran in parallel, not another's (a server runs a
  // checkpoint that queued, then a grep that would not).
  std::atomic<uint32_t> lone_client_{0};
  std::atomic<bool> probing_{false};
  void end_window(uint64_t now_ns);
  mutable std::mutex mutex_;  // the map only
  std::map<uint32_t, std::shared_ptr<client_account>> accounts_;
  std::mutex activity_mutex_;  // activation and deactivation (rare next to commands)
};

}  // namespace deepwell::detail
