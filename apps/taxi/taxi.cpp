// The taxi table's schema and generator (taxi.hpp).
#include "taxi/taxi.hpp"

#include <algorithm>
#include <cmath>

#include "deepwell/common/detail/parallel.hpp"

namespace deepwell::table {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The row's k-th uniform number in [0, 1).
struct row_rng {
  uint64_t base;
  double u(uint32_t k) const { return double(mix(base + k * 0x632BE59BD9B4E019ull) >> 11) * 0x1.0p-53; }
  uint64_t bits(uint32_t k) const { return mix(base ^ (uint64_t(k) << 56) ^ 0x5851F42D4C957F2Dull); }
};

int32_t cents(double dollars) { return int32_t(std::llround(dollars * 100.0)); }

}  // namespace

std::vector<column_file_writer::column_spec> taxi_schema() {
  using T = column_type;
  return {{"VendorID", T::int8},
          {"tpep_pickup_datetime", T::timestamp_us},
          {"tpep_dropoff_datetime", T::timestamp_us},
          {"passenger_count", T::int8},
          {"trip_distance", T::decimal32, 2},
          {"RatecodeID", T::int8},
          {"store_and_fwd_flag", T::int8},
          {"PULocationID", T::int16},
          {"DOLocationID", T::int16},
          {"payment_type", T::int8},
          {"fare_amount", T::decimal32, 2},
          {"extra", T::decimal32, 2},
          {"mta_tax", T::decimal32, 2},
          {"tip_amount", T::decimal32, 2},
          {"tolls_amount", T::decimal32, 2},
          {"improvement_surcharge", T::decimal32, 2},
          {"total_amount", T::decimal32, 2},
          {"congestion_surcharge", T::decimal32, 2},
          {"airport_fee", T::decimal32, 2}};
}

taxi_row taxi_row_at(uint64_t seed, uint64_t row) {
  const row_rng g{mix(seed * 0x9E3779B97F4A7C15ull) ^ row * 0xD1B54A32D192ED03ull};
  taxi_row t{};
  const bool long_trip = g.u(0) < taxi_long_trip_share;
  const bool airport_pickup = g.u(1) < (long_trip ? 0.45 : 0.07);
  // Distance: lognormal around 1.8 miles (capped below 30) for ordinary
  // trips; 30 + an exponential tail for long ones; 1% recorded as 0.
  double miles;
  if (long_trip) {
    miles = 30.0 + std::min(-8.0 * std::log(1.0 - g.u(2)), 120.0);
  } else {
    const double z = std::sqrt(-2.0 * std::log(1.0 - g.u(2))) * std::cos(6.283185307179586 * g.u(3));
    miles = std::min(std::exp(std::log(1.8) + 0.85 * z), 29.99);
    if (airport_pickup) miles = std::min(8.0 + 12.0 * g.u(4), 29.99);
    if (g.u(5) < 0.01) miles = 0;
  }
  t.trip_distance = cents(miles);
  const double minutes = 2.0 + miles * (2.2 + 2.5 * g.u(6));
  // Pickups over 2019 (UTC microseconds), busier by day.
  const double day = std::floor(g.u(7) * 365.0);
  const double hour = std::fmod(24.0 + 14.0 + 5.5 * std::sqrt(-2.0 * std::log(1.0 - g.u(8))) * std::cos(6.283185307179586 * g.u(9)), 24.0);
  t.pickup_us = int64_t(1546300800.0 + day * 86400.0 + hour * 3600.0) * 1000000 + int64_t(g.bits(10) % 1000000);
  t.dropoff_us = t.pickup_us + int64_t(minutes * 60.0 * 1e6);
  t.vendor_id = int8_t(1 + (g.bits(11) % 100 < 68));
  const double pc = g.u(12);
  t.passenger_count = int8_t(pc < 0.70 ? 1 : pc < 0.85 ? 2 : pc < 0.90 ? 3 : pc < 0.93 ? 4 : pc < 0.97 ? 5 : 6);
  t.ratecode_id = int8_t(long_trip ? (g.u(13) < 0.5 ? 4 : 5) : airport_pickup && miles > 15 ? 2 : 1);
  t.store_and_fwd = int8_t(g.u(14) < 0.01);
  static const int16_t airports[] = {132, 138};  // JFK, LaGuardia
  t.pu_location = airport_pickup ? airports[g.bits(15) & 1] : int16_t(1 + g.bits(15) % 263);
  t.do_location = int16_t(1 + g.bits(16) % 265);
  const double pay = g.u(17);
  t.payment_type = int8_t(pay < 0.71 ? 1 : pay < 0.98 ? 2 : pay < 0.99 ? 3 : 4);
  // Money, in cents. Metered fare: $3.00 flag, $2.50 a mile, $0.50 a
  // slow minute; JFK flat rate for ratecode 2.
  const double fare = t.ratecode_id == 2 ? 52.0 : 3.0 + 2.5 * miles + 0.5 * minutes * 0.3;
  t.fare_amount = cents(fare);
  const double ex = g.u(18);
  t.extra = ex < 0.45 ? 0 : ex < 0.75 ? 50 : ex < 0.92 ? 100 : 250;
  t.mta_tax = g.u(19) < 0.97 ? 50 : 0;
  t.improvement_surcharge = 30;  // the hail fee (2015-2022: $0.30 a trip)
  const double toll = g.u(20);
  t.tolls_amount = long_trip ? (toll < 0.6 ? cents(6.55 + 10.0 * g.u(21)) : 0)
                             : toll < 0.05 ? 655 : toll < 0.06 ? 1275 : 0;
  t.congestion_surcharge = g.u(22) < 0.72 ? 250 : 0;
  t.airport_fee = airport_pickup ? 125 : 0;
  t.tip_amount = t.payment_type == 1 ? cents(fare * (0.10 + 0.15 * g.u(23))) : 0;
  t.total_amount = t.fare_amount + t.extra + t.mta_tax + t.tip_amount + t.tolls_amount + t.improvement_surcharge +
                   t.congestion_surcharge + t.airport_fee;
  return t;
}

void generate_taxi(const std::string& path, const taxi_gen_options& o) {
  column_file_writer w(path, o.rows, taxi_schema(), o.row_group_rows);
  constexpr uint64_t block = 1 << 16;  // rows a thread makes and writes at once
  const uint64_t blocks = (o.rows + block - 1) / block;
  detail::parallel_for(blocks, o.threads, [&](unsigned, uint64_t b0, uint64_t b1) {
    std::vector<int8_t> vendor(block), pc(block), rate(block), sf(block), pay(block);
    std::vector<int64_t> pu_t(block), do_t(block);
    std::vector<int16_t> pu(block), dl(block);
    std::vector<int32_t> money[10];
    for (auto& m : money) m.resize(block);
    for (uint64_t b = b0; b < b1; ++b) {
      const uint64_t first = b * block, n = std::min(block, o.rows - first);
      for (uint64_t i = 0; i < n; ++i) {
        const taxi_row t = taxi_row_at(o.seed, first + i);
        vendor[i] = t.vendor_id;
        pu_t[i] = t.pickup_us;
        do_t[i] = t.dropoff_us;
        pc[i] = t.passenger_count;
        money[0][i] = t.trip_distance;
        rate[i] = t.ratecode_id;
        sf[i] = t.store_and_fwd;
        pu[i] = t.pu_location;
        dl[i] = t.do_location;
        pay[i] = t.payment_type;
        money[1][i] = t.fare_amount;
        money[2][i] = t.extra;
        money[3][i] = t.mta_tax;
        money[4][i] = t.tip_amount;
        money[5][i] = t.tolls_amount;
        money[6][i] = t.improvement_surcharge;
        money[7][i] = t.total_amount;
        money[8][i] = t.congestion_surcharge;
        money[9][i] = t.airport_fee;
      }
      w.write(0, first, n, vendor.data());
      w.write(1, first, n, pu_t.data());
      w.write(2, first, n, do_t.data());
      w.write(3, first, n, pc.data());
      w.write(4, first, n, money[0].data());
      w.write(5, first, n, rate.data());
      w.write(6, first, n, sf.data());
      w.write(7, first, n, pu.data());
      w.write(8, first, n, dl.data());
      w.write(9, first, n, pay.data());
      for (uint32_t m = 1; m < 10; ++m) w.write(9 + m, first, n, money[m].data());
      if (o.rows_written) o.rows_written->fetch_add(n, std::memory_order_relaxed);
    }
  });
  w.finish();
}

}  // namespace deepwell::table
