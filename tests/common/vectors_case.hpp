// A small clustered vector set, its queries, exact neighbours and index: the
// vector search tests' data (CPU and GPU suites).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/data.hpp"
#include "scratch_file.hpp"

namespace deepwell::test {

struct vectors_case {
  vectors::mixture_options mix;
  std::vector<uint8_t> base_bytes;
  vectors::vector_set base;
  std::vector<float> queries;  // nq x dim float32
  uint64_t nq = 0;
  std::vector<uint32_t> truth_ids;  // nq x truth_k
  std::vector<float> truth_d;
  uint32_t truth_k = 10;
  scratch_file index{"index.dwv"};
  vectors::build_report report;

  vectors_case(uint64_t count, uint32_t dim, vectors::vector_type t, vectors::metric m, uint64_t queries_n,
               const vectors::build_options& bo = {}) {
    mix.count = count;
    mix.dim = dim;
    mix.clusters = 16;
    mix.type = t;
    mix.seed = 7;
    base_bytes = vectors::generate_mixture(mix, 0, count);
    base = vectors::vector_set{base_bytes.data(), count, dim, t};
    vectors::mixture_options qo = mix;
    qo.stream = 1;
    qo.count = queries_n;
    const std::vector<uint8_t> qb = vectors::generate_mixture(qo, 0, queries_n);
    const vectors::vector_set qs{qb.data(), queries_n, dim, t};
    nq = queries_n;
    queries.resize(nq * dim);
    for (uint64_t i = 0; i < nq; ++i) vectors::row_as_float(qs, i, &queries[i * dim]);
    truth_ids.resize(nq * truth_k);
    truth_d.resize(nq * truth_k);
    vectors::exact_neighbours(base, queries.data(), nq, truth_k, m, truth_ids.data(), truth_d.data());
    report = vectors::build_index(base, m, index.path(), bo);
  }
};

}  // namespace deepwell::test
