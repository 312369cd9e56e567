#include "controller/share_arbiter.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "deepwell/common/error.hpp"

namespace deepwell {

double client_counters::latency_percentile_us(double p) const {
  uint64_t total = 0;
  for (uint64_t n : latency_us) total += n;
  if (total == 0) return 0;
  const uint64_t rank = uint64_t(std::ceil(p * double(total)));
  uint64_t seen = 0;
  for (int i = 0; i < latency_buckets; ++i) {
    seen += latency_us[i];
    if (seen >= rank && latency_us[i] != 0) return double(uint64_t(1) << i);  // the bucket's upper bound
  }
  return double(uint64_t(1) << (latency_buckets - 1));
}

namespace detail {

client_counters client_account::snapshot() const {
  client_counters c;
  for (unsigned s = 0; s < shard_count; ++s) {
    const client_counter_shard& k = shards_[s];
    c.commands += k.commands.get();
    c.reads += k.reads.get();
    c.writes += k.writes.get();
    c.flushes += k.flushes.get();
    c.bytes_read += k.bytes_read.get();
    c.bytes_written += k.bytes_written.get();
    c.errors += k.errors.get();
    c.throttled += k.throttled.get();
    for (int i = 0; i < client_counters::latency_buckets; ++i) c.latency_us[i] += k.latency_us[i].get();
    c.latency_ns_sum += k.latency_ns_sum.get();
  }
  c.in_flight_bytes = in_flight.load(std::memory_order_relaxed);
  return c;
}

void client_counter_shard::record_latency(uint64_t ns) {
  const uint64_t us = ns / 1000;
  // Bucket i holds [2^(i-1), 2^i) us; bucket 0 holds 0 us.
  int b = us == 0 ? 0 : int(std::bit_width(us));
  b = std::min(b, client_counters::latency_buckets - 1);
  latency_us[b].add(1);
  latency_ns_sum.add(ns);
}

share_arbiter::share_arbiter(uint64_t budget_bytes, latency_target lt, uint32_t max_nsid, unsigned shards)
    : budget_(budget_bytes), target_(lt), effective_(budget_bytes), lone_backoff_ns_(10 * lt.window_ns), max_nsid_(max_nsid),
      shards_(shards ? shards : 1),
      ns_(std::make_unique<ns_latency[]>(size_t(max_nsid) + 1)) {
  // Rows of whole cache lines plus one spare line: whatever the array's
  // alignment, no two pollers' entries share a line.
  constexpr size_t per_line = 64 / sizeof(window_sum);
  row_ = (size_t(max_nsid) + 1 + per_line - 1) / per_line * per_line + per_line;
  sums_.reset(new window_sum[row_ * shards_]);
}

std::shared_ptr<client_account> share_arbiter::account(uint32_t client) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& a = accounts_[client];
  if (!a) a = std::make_shared<client_account>(client, shards_);
  return a;
}

std::shared_ptr<client_account> share_arbiter::find(uint32_t client) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = accounts_.find(client);
  return it == accounts_.end() ? nullptr : it->second;
}

void share_arbiter::forget(uint32_t client) {
  std::lock_guard<std::mutex> lock(mutex_);
  accounts_.erase(client);
}

size_t share_arbiter::account_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return accounts_.size();
}

void share_arbiter::set_share(uint32_t client, const client_share& s) {
  if (!(s.weight > 0) || s.weight > 1e6) throw error("client weight must be above 0 and at most 1e6, not " + std::to_string(s.weight));
  std::shared_ptr<client_account> a = account(client);
  std::lock_guard<std::mutex> lock(activity_mutex_);
  const uint64_t w = std::max<uint64_t>(1, uint64_t(std::llround(s.weight * 1000)));
  if (a->active_weight != 0) {  // active now: move the sum to the new weight
    active_weight_.fetch_sub(a->active_weight, std::memory_order_relaxed);
    active_weight_.fetch_add(w, std::memory_order_relaxed);
    a->active_weight = w;
  }
  a->weight_milli.store(w, std::memory_order_relaxed);
  a->rate_bytes.store(s.rate_bytes, std::memory_order_relaxed);
}

void share_arbiter::begin(client_account& a) {
  if (a.demand.fetch_add(1, std::memory_order_acq_rel) != 0) return;
  std::lock_guard<std::mutex> lock(activity_mutex_);
  if (a.active_weight == 0 && a.demand.load(std::memory_order_acquire) != 0) {
    a.active_weight = a.weight_milli.load(std::memory_order_relaxed);
    active_weight_.fetch_add(a.active_weight, std::memory_order_relaxed);
    const uint64_t n = active_clients_.fetch_add(1, std::memory_order_relaxed) + 1;
    uint64_t peak = window_peak_clients_.load(std::memory_order_relaxed);
    while (n > peak && !window_peak_clients_.compare_exchange_weak(peak, n, std::memory_order_relaxed)) {
    }
    // Alone, and not the client the try state is about: it starts clean
    // (no strikes, no wait, the shortest backoff).
    if (n == 1 && lone_client_.exchange(a.id, std::memory_order_relaxed) != a.id) {
      lone_strikes_.store(0, std::memory_order_relaxed);
      lone_retry_at_.store(0, std::memory_order_relaxed);
      lone_backoff_ns_.store(10 * target_.window_ns, std::memory_order_relaxed);
    }
    // A second client: a lone client's room above the budget ends now,
    // not at the window's end.
    if (n >= 2) {
      uint64_t e = effective_.load(std::memory_order_relaxed);
      while (e > budget_ && !effective_.compare_exchange_weak(e, budget_, std::memory_order_relaxed)) {
      }
    }
  }
}

void share_arbiter::finish(client_account& a, uint64_t n, uint64_t released) {
  if (released) a.in_flight.fetch_sub(released, std::memory_order_relaxed);
  if (n == 0 || a.demand.fetch_sub(n, std::memory_order_acq_rel) != n) return;
  std::lock_guard<std::mutex> lock(activity_mutex_);
  if (a.active_weight != 0 && a.demand.load(std::memory_order_acquire) == 0) {
    active_weight_.fetch_sub(a.active_weight, std::memory_order_relaxed);
    a.active_weight = 0;
    active_clients_.fetch_sub(1, std::memory_order_relaxed);
  }
}

uint64_t share_arbiter::latency_floor_ns(uint32_t nsid) const {
  if (nsid != 0) return nsid <= max_nsid_ ? ns_[nsid].floor.load(std::memory_order_relaxed) : 0;
  uint64_t lowest = 0;
  const uint32_t top = top_nsid_.load(std::memory_order_relaxed);
  for (uint32_t n = 1; n <= top; ++n)
    if (const uint64_t f = ns_[n].floor.load(std::memory_order_relaxed); f && (!lowest || f < lowest)) lowest = f;
  return lowest;
}

void share_arbiter::completed(uint32_t nsid, uint64_t device_ns, uint64_t now_ns, unsigned shard, bool read) {
  if (target_.factor <= 0 || nsid == 0 || nsid > max_nsid_) return;
  ns_latency& n = ns_[nsid];
  if (uint32_t top = top_nsid_.load(std::memory_order_relaxed); nsid > top)
    while (nsid > top && !top_nsid_.compare_exchange_weak(top, nsid, std::memory_order_relaxed)) {
    }
  // A probe's samples: commands admitted after it began (those admitted
  // before waited behind the backlog it is draining).
  if (probing_.load(std::memory_order_relaxed) && now_ns - device_ns >= probed_at_.load(std::memory_order_relaxed)) {
    const uint64_t k = n.probe_count.fetch_add(1, std::memory_order_relaxed);
    if (k < latency_target::max_probe_samples) n.probe[k].store(device_ns, std::memory_order_relaxed);
  }
  window_sum& w = sum_of(shard, nsid);
  w.sum.add(device_ns);
  w.count.add(1);
  if (read) {
    w.read_sum.add(device_ns);
    w.read_count.add(1);
  }
  uint64_t start = window_start_.load(std::memory_order_relaxed);
  if (start == 0) {
    window_start_.compare_exchange_strong(start, now_ns, std::memory_order_relaxed);
    return;
  }
  // One thread ends each window: the one whose CAS moves its start.
  if (now_ns - start >= target_.window_ns &&
      window_start_.compare_exchange_strong(start, now_ns, std::memory_order_relaxed))
    end_window(now_ns);
}

// Adds what a shard's counters gained since the last window to (c, sum).
void share_arbiter::take_window(const single_writer_counter& count, const single_writer_counter& sum,
                                std::atomic<uint64_t>& seen_count, std::atomic<uint64_t>& seen_sum, uint64_t& c,
                                uint64_t& s) {
  const uint64_t total_count = count.get(), total_sum = sum.get();
  const uint64_t was_count = seen_count.exchange(total_count, std::memory_order_relaxed);
  const uint64_t was_sum = seen_sum.exchange(total_sum, std::memory_order_relaxed);
  if (total_count > was_count && total_sum >= was_sum) {  // else an overlapping end saw later totals
    c += total_count - was_count;
    s += total_sum - was_sum;
  }
}

void share_arbiter::end_window(uint64_t now_ns) {
  // Clients that had commands waiting or in flight at once, at the most,
  // during the window (a light client's one miss counts).
  const uint64_t clients = window_peak_clients_.exchange(active_clients_.load(std::memory_order_relaxed),
                                                         std::memory_order_relaxed);
  uint64_t eff = effective_.load(std::memory_order_relaxed);
  const bool probing = probing_.load(std::memory_order_relaxed);
  if (clients >= 2) contended_until_.store(now_ns + target_.hold_ns, std::memory_order_relaxed);
  // One client (or none) for a while.
  const bool lone = !probing && clients < 2 && now_ns >= contended_until_.load(std::memory_order_relaxed);
  // Each namespace's window: the worst mean latency against its floor
  // (contended), or against its latency at the budget (a lone client above it).
  const uint32_t top = top_nsid_.load(std::memory_order_relaxed);
  uint64_t count = 0;       // commands done in the window
  double worst = 0;         // mean / (factor * floor), over namespaces with a floor
  bool unfloored = false;   // a namespace was used that has no floor yet
  double lone_worst = 0;    // mean / (factor * lone_base), over namespaces with one
  bool lone_unknown = false;  // a namespace busy above the budget with no latency at it yet
  for (uint32_t i = 1; i <= top; ++i) {
    ns_latency& n = ns_[i];
    uint64_t c = 0, sum = 0, rc = 0, rsum = 0;
    for (unsigned k = 0; k < shards_; ++k) {
      window_sum& w = sum_of(k, i);
      // A command added between the two loads counts in one window's count
      // and the next one's sum: a mean off by one command, harmless.
      take_window(w.count, w.sum, w.seen_count, w.seen_sum, c, sum);
      take_window(w.read_count, w.read_sum, w.seen_read_count, w.seen_read_sum, rc, rsum);
    }
    if (c == 0) continue;
    count += c;
    // The lone verdict on reads where the window has enough of them, else
    // on every command, each against its own base.
    const bool by_reads = rc >= target_.lone_samples;
    if (lone && (by_reads || c >= target_.lone_samples)) {
      const uint64_t mean = by_reads ? rsum / rc : sum / c;
      std::atomic<uint64_t>& b = by_reads ? n.lone_read_base : n.lone_base;
      if (eff == budget_) {
        const uint64_t was = b.load(std::memory_order_relaxed);
        b.store(was ? (3 * was + mean) / 4 : mean, std::memory_order_relaxed);
      } else if (eff > budget_) {
        const uint64_t base = b.load(std::memory_order_relaxed);
        if (base == 0)
          lone_unknown = true;
        else
          lone_worst = std::max(lone_worst, double(mean) / (target_.factor * double(base)));
      }
    }
    const uint64_t floor = n.floor.load(std::memory_order_relaxed);
    if (floor == 0)
      unfloored = true;
    else
      worst = std::max(worst, double(sum) / double(c) / (target_.factor * double(floor)));
  }
  const uint64_t step = std::max<uint64_t>(budget_ / 32, 4096);
  const bool refused = refused_.exchange(false, std::memory_order_relaxed);
  if (probing) {
    // The probe runs with one command per client until every namespace
    // that has commands done in it has probe_samples of them (or probe_ns
    // passed and one has some): their median is the storage's own latency.
    // Then it resumes where it was (or gives up after a second). A
    // namespace with no sample keeps its floor.
    bool sampled = false, enough = true;
    for (uint32_t i = 1; i <= top; ++i) {
      const uint64_t c = ns_[i].probe_count.load(std::memory_order_relaxed);
      sampled |= c != 0;
      if (c != 0 && c < target_.probe_samples) enough = false;
    }
    const uint64_t probing_for = now_ns - probed_at_.load(std::memory_order_relaxed);
    if (!(sampled && (enough || probing_for >= target_.probe_ns)) && probing_for <= 1'000'000'000) return;
    for (uint32_t i = 1; i <= top; ++i) {
      const uint64_t c = std::min<uint64_t>(ns_[i].probe_count.load(std::memory_order_relaxed),
                                            latency_target::max_probe_samples);
      if (c == 0) continue;
      uint64_t v[latency_target::max_probe_samples];
      for (uint64_t k = 0; k < c; ++k) v[k] = ns_[i].probe[k].load(std::memory_order_relaxed);
      std::nth_element(v, v + c / 2, v + c);
      if (v[c / 2] != 0) ns_[i].floor.store(v[c / 2], std::memory_order_relaxed);  // 0: a sample not yet stored
    }
    probing_.store(false, std::memory_order_relaxed);
    effective_.store(std::max<uint64_t>(resume_budget_.load(std::memory_order_relaxed), 1), std::memory_order_relaxed);
    return;
  }
  if (count == 0 || lone) {
    // One client (or none) for a while: back to the whole budget, and
    // above it while that pays (latency_target's lone_*).
    if (eff < budget_) {
      effective_.store(std::min(budget_, eff + 8 * step), std::memory_order_relaxed);
      return;
    }
    if (count < target_.lone_samples) return;
    const bool may_grow = refused && now_ns >= lone_retry_at_.load(std::memory_order_relaxed);
    if (eff == budget_) {
      if (may_grow) {
        lone_strikes_.store(0, std::memory_order_relaxed);  // a try starts clean
        effective_.store(budget_ * target_.lone_growth, std::memory_order_relaxed);
      }
      return;
    }
    if (lone_unknown) {
      // Storage it has not run at the budget (another dataset, another
      // client's): its latency there first.
      effective_.store(budget_, std::memory_order_relaxed);
      return;
    }
    if (lone_worst > 1) {
      // Over once: hold, and look again. Over twice in a row: it queued
      // rather than ran in parallel: a step back, and no growth for a
      // while, twice as long after each such try (each costs windows of
      // backlog), up to probe_every_ns.
      if (lone_strikes_.fetch_add(1, std::memory_order_relaxed) + 1 < 2) return;
      lone_strikes_.store(0, std::memory_order_relaxed);
      effective_.store(std::max(budget_, eff / target_.lone_growth), std::memory_order_relaxed);
      const uint64_t wait = lone_backoff_ns_.load(std::memory_order_relaxed);
      lone_retry_at_.store(now_ns + wait, std::memory_order_relaxed);
      lone_backoff_ns_.store(std::min(2 * wait, target_.probe_every_ns), std::memory_order_relaxed);
    } else {
      lone_strikes_.store(0, std::memory_order_relaxed);
      lone_backoff_ns_.store(10 * target_.window_ns, std::memory_order_relaxed);  // it paid
      if (may_grow)
        effective_.store(std::min(budget_ * target_.lone_max, eff * target_.lone_growth), std::memory_order_relaxed);
    }
    return;
  }
  // Contended: never above the budget (a lone window's end may have raced
  // a second client's arrival, which put it back).
  if (eff > budget_) {
    eff = budget_;
    effective_.store(eff, std::memory_order_relaxed);
  }
  const uint64_t since_probe = now_ns - probed_at_.load(std::memory_order_relaxed);
  // A namespace without a floor asks for a probe, but not more often than
  // every probe_ns (its commands may not finish within a probe).
  if ((unfloored && since_probe >= target_.probe_ns) || since_probe >= target_.probe_every_ns) {
    probed_at_.store(now_ns, std::memory_order_relaxed);
    resume_budget_.store(std::min(eff, budget_), std::memory_order_relaxed);
    for (uint32_t i = 1; i <= top; ++i) {
      for (auto& x : ns_[i].probe) x.store(0, std::memory_order_relaxed);
      ns_[i].probe_count.store(0, std::memory_order_relaxed);
    }
    probing_.store(true, std::memory_order_relaxed);
    effective_.store(1, std::memory_order_relaxed);  // every client keeps its one command
    return;
  }
  if (worst == 0) return;  // only namespaces without a floor: no verdict
  if (worst > 1) {
    // Down in proportion to the overshoot (latency follows the backlog on
    // a device that is already busy), at least by a quarter, at most 16x.
    const double cut = std::clamp(1 / worst, 1.0 / 16, 0.75);
    effective_.store(std::max<uint64_t>(uint64_t(double(eff) * cut), 1), std::memory_order_relaxed);
  } else
    effective_.store(std::min(budget_, eff + step), std::memory_order_relaxed);
}

uint64_t share_arbiter::allowed(const client_account& a) const {
  const uint64_t w = a.weight_milli.load(std::memory_order_relaxed);
  const uint64_t all = std::max(active_weight_.load(std::memory_order_relaxed), w);
  return uint64_t((unsigned __int128)budget() * w / all);
}

uint64_t share_arbiter::excess_credit(const client_account& a, uint64_t credit) const {
  if (credit == 0) return 0;
  const uint64_t allowed = this->allowed(a);
  if (a.in_flight.load(std::memory_order_relaxed) > allowed) return credit;
  const uint64_t keep = allowed / (2 * std::max<uint64_t>(1, a.queues.load(std::memory_order_relaxed)));
  return credit > keep ? credit - keep : 0;
}

uint64_t share_arbiter::reserve(client_account& a, uint64_t cost, uint64_t want) {
  want = std::max(want, cost);
  uint64_t mine = a.in_flight.load(std::memory_order_relaxed);
  const uint64_t allowed = this->allowed(a);
  for (;;) {
    uint64_t got;
    if (mine == 0) {
      got = std::max(cost, std::min(want, allowed));
    } else {
      if (mine + cost > allowed) {
        // A flag, read before it is written: a flooding client's pollers
        // refuse on every pass, and a shared counter's line would bounce
        // between them (the cost the shards avoid).
        if (!refused_.load(std::memory_order_relaxed)) refused_.store(true, std::memory_order_relaxed);
        return 0;
      }
      got = std::min(want, allowed - mine);
    }
    // A compare-exchange, not an add: two pollers reserving for one client
    // at once must not both take the room that is left.
    if (a.in_flight.compare_exchange_weak(mine, mine + got, std::memory_order_relaxed)) return got;
  }
}

bool share_arbiter::older_waiter(const client_account& a, unsigned shard, uint64_t since) const {
  for (unsigned i = 0; i < a.shard_count; ++i) {
    if (i == shard) continue;
    const uint64_t w = a.waiter(i).since.load(std::memory_order_relaxed);
    if (w != 0 && w + waiter_grace_ns < since) return true;
  }
  return false;
}

bool share_arbiter::rate_allows(client_account& a, uint64_t cost, uint64_t now_ns) {
  const uint64_t rate = a.rate_bytes.load(std::memory_order_relaxed);
  if (rate == 0) return true;
  // A token bucket that may go into debt by one command: a command larger
  // than the burst still runs, and the debt delays the next.
  std::lock_guard<std::mutex> lock(a.rate_mutex);
  const int64_t burst = int64_t(std::max<uint64_t>(rate / 20, 64 * 1024));  // 50 ms of the rate
  if (a.refilled_ns == 0) {
    a.refilled_ns = now_ns;
    a.tokens = burst;
  } else if (now_ns > a.refilled_ns) {
    const double add = double(now_ns - a.refilled_ns) * 1e-9 * double(rate);
    if (add >= 1) {
      a.tokens = std::min<int64_t>(burst, a.tokens + int64_t(add));
      a.refilled_ns = now_ns;
    }
  }
  if (a.tokens <= 0) return false;
  a.tokens -= int64_t(cost);
  return true;
}

bool share_arbiter::try_admit(client_account& a, uint64_t cost, uint64_t now_ns) {
  // A command that moves nothing (it fails at once) takes no share.
  const uint64_t got = cost ? reserve(a, cost, cost) : 0;
  if (cost && got == 0) return false;
  if (!rate_allows(a, cost, now_ns)) {
    if (got) a.in_flight.fetch_sub(got, std::memory_order_relaxed);
    return false;
  }
  return true;
}

}  // namespace detail
}  // namespace deepwell
