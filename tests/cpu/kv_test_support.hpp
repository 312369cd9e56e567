// Shared by the key-value store's tests: a model of the store (a hash map),
// random batches, and checks of a store against the model.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"

namespace deepwell::kv_test {

using namespace deepwell::durable;

inline controller_config quiet_controller() {
  controller_config c;
  c.pollers = 1;
  c.spin_us = 20;
  return c;
}

inline uint64_t value_word(uint64_t batch, uint64_t key, uint32_t j) {
  return log_format::mix64(batch * 0x9E3779B97F4A7C15ull + key * 131 + j + 1);
}

using model = std::unordered_map<uint64_t, std::vector<uint64_t>>;

struct op_list {
  std::vector<uint8_t> ops;
  std::vector<uint64_t> keys;
  std::vector<uint64_t> values;  // vw words per op
};

// A batch of mixed ops over keys [0, universe), some keys repeated.
inline op_list random_batch(std::mt19937_64& rng, uint64_t batch, uint64_t universe, uint32_t vw, uint64_t n,
                     double erase_share = 0.3) {
  op_list b;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t key = (i > 0 && rng() % 5 == 0) ? b.keys[rng() % i] : rng() % universe;
    const bool erase = double(rng() % 1000) < erase_share * 1000;
    b.ops.push_back(erase ? kv_op_erase : kv_op_set);
    b.keys.push_back(key);
    for (uint32_t j = 0; j < vw; ++j) b.values.push_back(value_word(batch, key, j) + i);
  }
  return b;
}

// The model after a batch (ops in order: the last on a key wins), and the
// status and counts the store must report.
struct expected {
  std::vector<uint8_t> status;
  uint64_t inserted = 0, updated = 0, erased = 0, not_found = 0, superseded = 0;
};
inline expected apply_to(model& m, const op_list& b, uint32_t vw) {
  expected e;
  std::unordered_map<uint64_t, uint64_t> last;
  for (uint64_t i = 0; i < b.keys.size(); ++i) last[b.keys[i]] = i;
  e.status.resize(b.keys.size(), kv_ok);
  for (uint64_t i = 0; i < b.keys.size(); ++i) {
    const uint64_t k = b.keys[i];
    if (last[k] != i) {
      ++e.superseded;
      continue;
    }
    const bool present = m.count(k) != 0;
    if (b.ops[i] == kv_op_set)
      ++(present ? e.updated : e.inserted);
    else if (present)
      ++e.erased;
    else {
      ++e.not_found;
      e.status[i] = kv_not_found;
    }
  }
  for (uint64_t i = 0; i < b.keys.size(); ++i) {
    if (b.ops[i] == kv_op_set)
      m[b.keys[i]] = std::vector<uint64_t>(b.values.begin() + i * vw, b.values.begin() + (i + 1) * vw);
    else
      m.erase(b.keys[i]);
  }
  return e;
}

// Every key of [0, universe) read back and compared with the model.
inline ::testing::AssertionResult gets_match(kv_store& kv, const model& m, uint64_t universe, uint32_t vw) {
  std::vector<uint64_t> keys(universe);
  for (uint64_t k = 0; k < universe; ++k) keys[k] = k;
  std::vector<uint64_t> got(universe * vw, 7);
  std::vector<uint8_t> st(universe, 99);
  for (uint64_t at = 0; at < universe; at += kv.info().max_batch) {
    const uint64_t n = std::min<uint64_t>(kv.info().max_batch, universe - at);
    kv.get(keys.data() + at, got.data() + at * vw, n, kv_memory::host, st.data() + at);
  }
  for (uint64_t k = 0; k < universe; ++k) {
    auto it = m.find(k);
    if (it == m.end()) {
      if (st[k] != kv_not_found) return ::testing::AssertionFailure() << "key " << k << " should be absent, status " << int(st[k]);
      for (uint32_t j = 0; j < vw; ++j)
        if (got[k * vw + j] != 0) return ::testing::AssertionFailure() << "absent key " << k << ": value not zeroed";
    } else {
      if (st[k] != kv_ok) return ::testing::AssertionFailure() << "key " << k << " should be present, status " << int(st[k]);
      for (uint32_t j = 0; j < vw; ++j)
        if (got[k * vw + j] != it->second[j])
          return ::testing::AssertionFailure() << "key " << k << " word " << j << ": " << got[k * vw + j] << " != "
                                               << it->second[j];
    }
  }
  return ::testing::AssertionSuccess();
}

// The table as read from storage (contents), compared with a model: every
// key once, with its value.
inline ::testing::AssertionResult contents_match(kv_store& kv, const model& m, uint32_t vw) {
  std::vector<uint64_t> keys;
  std::vector<uint8_t> values;
  kv.contents(keys, values);
  std::set<uint64_t> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!seen.insert(keys[i]).second) return ::testing::AssertionFailure() << "key " << keys[i] << " is in the table twice";
    auto it = m.find(keys[i]);
    if (it == m.end()) return ::testing::AssertionFailure() << "key " << keys[i] << " is in the table, not in the model";
    if (std::memcmp(values.data() + i * vw * 8, it->second.data(), vw * 8) != 0)
      return ::testing::AssertionFailure() << "key " << keys[i] << ": another value";
  }
  if (keys.size() != m.size())
    return ::testing::AssertionFailure() << keys.size() << " keys in the table, " << m.size() << " in the model";
  return ::testing::AssertionSuccess();
}

}  // namespace deepwell::kv_test
