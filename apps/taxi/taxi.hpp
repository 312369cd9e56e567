// The NYC TLC yellow-taxi trip table (the 2019-2023 schema) and a
// deterministic generator of it with realistic distributions: the values of
// row r depend only on (seed, r), so a table of any size is written by any
// number of threads and regenerated identically on another machine. Money
// and distance are decimals with 2 digits (cents, hundredths of a mile),
// times microseconds. About taxi_long_trip_share of the trips are at least
// 30 miles, as in BaM's data (0.03%).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/table/column_file.hpp"

namespace deepwell::table {

constexpr double taxi_long_trip_share = 0.0003;

struct taxi_row {
  int8_t vendor_id;
  int64_t pickup_us, dropoff_us;
  int8_t passenger_count;
  int32_t trip_distance;  // hundredths of a mile
  int8_t ratecode_id;
  int8_t store_and_fwd;   // 1: 'Y'
  int16_t pu_location, do_location;
  int8_t payment_type;    // 1 card, 2 cash, 3 no charge, 4 dispute
  // cents
  int32_t fare_amount, extra, mta_tax, tip_amount, tolls_amount, improvement_surcharge, total_amount,
      congestion_surcharge, airport_fee;
};

// The columns in file order, with the TLC's names.
std::vector<column_file_writer::column_spec> taxi_schema();
taxi_row taxi_row_at(uint64_t seed, uint64_t row);

struct taxi_gen_options {
  uint64_t rows = 1 << 20;
  uint64_t seed = 1;
  unsigned threads = 0;              // 0: every core
  uint64_t row_group_rows = 1 << 20; // statistics granularity
  std::atomic<uint64_t>* rows_written = nullptr;  // optional: rows made and written so far (progress)
};
// Writes a column file of the table.
void generate_taxi(const std::string& path, const taxi_gen_options& o);

}  // namespace deepwell::table
