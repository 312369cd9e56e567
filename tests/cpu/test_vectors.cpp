// Vector search with CPU clients: recall against exact search through a page
// cache far smaller than the index, the same answers whatever the thread
// count, a build that gives the same file twice, and bad input and damaged
// files refused by name.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "../common/vectors_case.hpp"
#include "cache_test_support.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/vectors/index.hpp"
#include "deepwell/vectors/index_file.hpp"

using namespace deepwell;
using namespace deepwell::vectors;
using deepwell::test::scratch_file;
using deepwell::test::vectors_case;

namespace {

cache_config small_cache(uint64_t pages) {
  cache_config k = test::small_cache(pages);
  k.direct_files = cache_config::file_tier::never;  // every record through the controller
  return k;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void flip_byte(const std::string& path, uint64_t at) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, off_t(at)), 1);
  b ^= 0x5a;
  ASSERT_EQ(::pwrite(fd, &b, 1, off_t(at)), 1);
  ::close(fd);
}

struct searched {
  std::vector<uint32_t> ids;
  std::vector<float> d;
  search_counts counts;
};

searched run(const vectors_case& c, const search_options& o, unsigned threads, uint64_t pages = 48) {
  auto cache = make_host_page_cache(embedded_link(), small_cache(pages));
  vector_index index(cache, c.index.path());
  searched s;
  s.ids.resize(c.nq * o.k);
  s.d.resize(c.nq * o.k);
  s.counts = index.search(c.queries.data(), c.nq, o, s.ids.data(), s.d.data(), threads);
  return s;
}

}  // namespace

TEST(VectorSearch, RecallAgainstExactSearchThroughASmallCache) {
  struct shape {
    vector_type t;
    metric m;
    uint32_t dim;
  };
  for (const shape sh : {shape{vector_type::f32, metric::l2, 48}, shape{vector_type::u8, metric::l2, 64},
                         shape{vector_type::f16, metric::inner_product, 32}}) {
    SCOPED_TRACE(std::string(type_name(sh.t)) + " " + metric_name(sh.m));
    build_options bo;
    bo.degree = 24;
    bo.list = 48;
    // Smaller under ThreadSanitizer (still eight times the cache's pages).
    const vectors_case c(test::scale_div > 1 ? 2500 : 4000, sh.dim, sh.t, sh.m, test::scale_div > 1 ? 60 : 200, bo);
    const index_file f(c.index.path());
    // The records far larger than the cache: the search runs under eviction.
    const uint64_t pages = 24;
    ASSERT_GT(f.header().records_bytes, 4 * pages * 4096);
    search_options o;
    o.k = 10;
    o.list = 64;
    const searched s = run(c, o, 4, pages);
    const double recall = recall_at(10, s.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
    EXPECT_GE(recall, 0.9) << "recall@10 " << recall;
    EXPECT_EQ(s.counts.bad_ids, 0u);
    EXPECT_GT(s.counts.expansions, c.nq * 10);
    // Nearest first, distances those of the ids.
    for (uint64_t q = 0; q < c.nq; ++q)
      for (uint32_t j = 1; j < o.k; ++j) EXPECT_LE(s.d[q * o.k + j - 1], s.d[q * o.k + j]);
    // A longer list finds at least as much.
    o.list = 160;
    const searched wide = run(c, o, 4, pages);
    EXPECT_GE(recall_at(10, wide.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq), recall);
  }
}

// The inner product's default codes (2 dimensions a byte) keep its recall
// with L2's: with 4 a byte this set reached 0.91 at list 64.
TEST(VectorSearch, TheInnerProductsDefaultCodesKeepItsRecall) {
  build_options bo;
  bo.degree = 24;
  bo.list = 48;
  // Half under ThreadSanitizer (there the old codes passed too; the subspace count still tells).
  const vectors_case c(test::scale_div > 1 ? 4000 : 8000, 40, vector_type::f16, metric::inner_product,
                       test::scale_div > 1 ? 60 : 200, bo);
  EXPECT_EQ(c.report.pq_subspaces, 20u);
  search_options o;
  o.k = 10;
  o.list = 64;
  const searched s = run(c, o, 4, 64);
  const double recall = recall_at(10, s.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
  EXPECT_GE(recall, 0.95) << "recall@10 " << recall;
}

TEST(VectorSearch, TheSameAnswersWhateverTheThreadsAndTheCache) {
  const vectors_case c(3000, 32, vector_type::f32, metric::l2, 100);
  for (const int use : {0, 1, 2}) {  // whole pages (nearer mates), whole pages (all mates), picked records
    SCOPED_TRACE(use);
    search_options o;
    o.k = 8;
    o.list = 40;
    o.width = 3;
    o.whole_pages = use != 2;
    o.all_mates = use == 1;
    const searched a = run(c, o, 1, 1024);
    const searched b = run(c, o, 4, 32);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(0, std::memcmp(a.d.data(), b.d.data(), a.d.size() * 4));
    EXPECT_EQ(a.counts.expansions, b.counts.expansions);
    EXPECT_EQ(a.counts.distances, b.counts.distances);
    EXPECT_EQ(a.counts.fetches, b.counts.fetches);
    EXPECT_EQ(a.counts.page_mates, b.counts.page_mates);
  }
}

// Whole pages (Starling's block search): every record of a fetched page gets
// its exact distance, those nearer the query than the picked one join the
// list, and those the list holds are expanded without a fetch of their own.
// The pages hold graph neighbourhoods, so a search at the same list fetches
// fewer pages and finds at least as much.
TEST(VectorSearch, WholePagesFetchFewerPagesForTheSameList) {
  build_options bo;
  bo.degree = 24;
  bo.list = 48;
  const vectors_case c(test::scale_div > 1 ? 3000 : 8000, 32, vector_type::u8, metric::l2, test::scale_div > 1 ? 60 : 200, bo);
  ASSERT_GT(index_file(c.index.path()).header().records_per_page, 8u);
  for (const uint32_t list : {32u, 96u}) {
    SCOPED_TRACE("list " + std::to_string(list));
    search_options o;
    o.k = 10;
    o.list = list;
    o.whole_pages = false;
    const searched one = run(c, o, 4, 24);
    o.whole_pages = true;
    const searched page = run(c, o, 4, 24);
    EXPECT_EQ(one.counts.page_mates, 0u);
    EXPECT_EQ(one.counts.fetches, one.counts.expansions);  // a fetch a node expanded
    EXPECT_GT(page.counts.page_mates, 0u);
    EXPECT_LE(page.counts.fetches, page.counts.expansions - page.counts.page_mates);  // at most a fetch a pick
    EXPECT_LT(page.counts.fetches, one.counts.fetches);
    const double r_one = recall_at(10, one.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
    const double r_page = recall_at(10, page.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
    std::printf("  list %u: %.1f fetches a query, recall %.3f (whole pages); %.1f, %.3f (picked records)\n", list,
                double(page.counts.fetches) / double(c.nq), r_page, double(one.counts.fetches) / double(c.nq), r_one);
    EXPECT_GE(r_page, r_one);
    // The cap counts every node expanded, page mates with the picks.
    o.max_expansions = 12;
    const searched capped = run(c, o, 4, 24);
    EXPECT_LE(capped.counts.expansions, c.nq * 12);
    EXPECT_GT(capped.counts.page_mates, 0u);
  }
}

// An entry sample: each query starts at the nearest (by code) of the entry
// node and nodes spread over the index, not at the medoid, so a short list
// reaches the query's cluster with fewer fetches. A sample of every node
// starts at the nearest by code, whatever the threads.
TEST(VectorSearch, AnEntrySampleStartsNearTheQuery) {
  const vectors_case c(3000, 32, vector_type::u8, metric::l2, 100);
  search_options o;
  o.k = 10;
  o.list = 16;
  o.entry_sample = 0;
  const searched medoid = run(c, o, 2);
  o.entry_sample = 256;
  const searched sampled = run(c, o, 2);
  const double r0 = recall_at(10, medoid.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
  const double r1 = recall_at(10, sampled.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
  std::printf("  list 16: medoid %.1f fetches a query, recall %.3f; entry sample 256: %.1f, %.3f\n",
              double(medoid.counts.fetches) / double(c.nq), r0, double(sampled.counts.fetches) / double(c.nq), r1);
  EXPECT_LT(sampled.counts.fetches, medoid.counts.fetches);
  EXPECT_GE(r1, r0 - 0.01);
  o.entry_sample = 3000;  // every node: ids j
  const searched every1 = run(c, o, 1, 1024);
  const searched every4 = run(c, o, 4, 32);
  EXPECT_EQ(every1.ids, every4.ids);
  EXPECT_EQ(every1.counts.distances, every4.counts.distances);
  EXPECT_EQ(every1.counts.fetches, every4.counts.fetches);
}

// A set smaller than its pages' sum: the last page holds fewer records
// than the others. A list as long as the set reaches every node, so whole
// pages (the last one read short) find the exact neighbours, as picked
// records do.
TEST(VectorSearch, WholePagesReadTheShortLastPage) {
  build_options bo;
  bo.degree = 16;
  bo.list = 32;
  const vectors_case c(300, 8, vector_type::f32, metric::l2, 40, bo);
  const index_header h = index_file(c.index.path()).header();
  ASSERT_NE(h.count % h.records_per_page, 0u) << "the last page must be short";
  for (const bool whole : {true, false}) {
    SCOPED_TRACE(whole ? "whole pages" : "picked records");
    search_options o;
    o.k = 10;
    o.list = 300;
    o.whole_pages = whole;
    const searched s = run(c, o, 2, 8);
    EXPECT_EQ(recall_at(10, s.ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq), 1.0);
    if (whole) EXPECT_LE(s.counts.fetches, c.nq * ((h.count + h.records_per_page - 1) / h.records_per_page));
  }
}

// Whatever the thread count: the build's parallel steps (the mean's sums,
// the records' pages, the codes) give the same bits on 1 thread as on 3.
TEST(VectorSearch, TheBuildGivesTheSameFileWhateverTheThreads) {
  const vectors_case c(2000, 16, vector_type::u8, metric::l2, 4);
  EXPECT_EQ(c.report.vectors, 2000u);
  EXPECT_GT(c.report.edges, 2000u * 4);
  for (const unsigned threads : {1u, 3u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    scratch_file again("again.dwv");
    build_options o;
    o.threads = threads;
    const build_report r = build_index(c.base, metric::l2, again.path(), o);
    EXPECT_EQ(file_bytes(c.index.path()), file_bytes(again.path()));
    // The report's parts lie inside its phases.
    EXPECT_GT(r.first_graph_seconds, 0);
    EXPECT_GT(r.passes_seconds, 0);
    EXPECT_LE(r.first_graph_seconds + r.passes_seconds + r.state_seconds, r.graph_seconds + r.quantiser_seconds);
    EXPECT_GT(r.layout_seconds, 0);
    EXPECT_LE(r.layout_seconds, r.write_seconds);
    EXPECT_EQ(r.redone_nodes, 0u);  // CPU threads redo nothing
  }
}

// A build stopped after each of its phases resumes from the state it kept
// and writes the same file as a build that never stopped; a damaged state,
// or one of other vectors, is not used.
TEST(VectorSearch, AnInterruptedBuildResumesToTheSameFile) {
  const vectors_case c(test::scale_div > 1 ? 800 : 2500, 24, vector_type::f32, metric::l2, 4);
  const std::vector<uint8_t> whole = file_bytes(c.index.path());
  for (uint32_t stop_at = 1; stop_at <= 4; stop_at += test::scale_div > 1 ? 2 : 1) {
    SCOPED_TRACE("stopped after phase " + std::to_string(stop_at));
    scratch_file f("resumed.dwv");
    const std::string state = f.path() + ".build";
    uint32_t calls = 0;
    build_options stop;
    stop.keep_going = [&] { return ++calls < stop_at; };
    try {
      build_index(c.base, metric::l2, f.path(), stop);
      ADD_FAILURE() << "the build did not stop";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("build again to resume"), std::string::npos) << e.what();
    }
    ASSERT_EQ(::access(state.c_str(), F_OK), 0) << "no state kept";
    const build_report r = build_index(c.base, metric::l2, f.path());
    EXPECT_EQ(r.resumed_phases, stop_at);
    EXPECT_EQ(file_bytes(f.path()), whole);
    EXPECT_NE(::access(state.c_str(), F_OK), 0) << "the state outlived the index";
  }
  // A damaged state starts the build over (and still gives the same file).
  scratch_file f("damaged.dwv");
  const std::string state = f.path() + ".build";
  build_options stop;
  stop.keep_going = [] { return false; };
  EXPECT_THROW(build_index(c.base, metric::l2, f.path(), stop), error);
  flip_byte(state, 200);
  EXPECT_EQ(build_index(c.base, metric::l2, f.path()).resumed_phases, 0u);
  EXPECT_EQ(file_bytes(f.path()), whole);
  // Another set's state is not used.
  EXPECT_THROW(build_index(c.base, metric::l2, f.path(), stop), error);
  std::vector<uint8_t> other(c.base_bytes);
  other[7] ^= 1;
  EXPECT_EQ(build_index(vector_set{other.data(), c.base.count, c.base.dim, c.base.type}, metric::l2, f.path())
                .resumed_phases,
            0u);
}

// Out of core: a set built in overlapping shards (each held alone, then
// merged) answers as well as one built at once, for both metrics and the
// inner product's extra coordinate; the same file whatever the threads; a
// build stopped after a shard resumes to the same file.
TEST(VectorSearch, AShardedBuildAnswersAsWellAsOneBuiltAtOnce) {
  struct shape {
    vector_type t;
    metric m;
    uint32_t dim;
  };
  const uint64_t count = test::scale_div > 1 ? 2500 : 4000;
  for (const shape sh : {shape{vector_type::f32, metric::l2, 32}, shape{vector_type::f16, metric::inner_product, 24}}) {
    SCOPED_TRACE(std::string(type_name(sh.t)) + " " + metric_name(sh.m));
    build_options bo;
    bo.degree = 24;
    bo.list = 48;
    const vectors_case c(count, sh.dim, sh.t, sh.m, test::scale_div > 1 ? 60 : 200, bo);
    EXPECT_EQ(c.report.shards, 0u);
    scratch_file sharded("sharded.dwv");
    build_options so = bo;
    so.shard_vectors = min_shard_vectors;
    so.threads = 3;
    const build_report r = build_index(c.base, sh.m, sharded.path(), so);
    // 2n memberships over shards of at most 1,024 rows.
    EXPECT_GE(r.shards, 2 * count / min_shard_vectors);
    EXPECT_GT(r.edges, count * 4);
    search_options o;
    o.k = 10;
    o.list = 16;  // short: the graph's quality shows
    auto recall = [&](const std::string& path) {
      auto cache = make_host_page_cache(embedded_link(), small_cache(48));
      vector_index index(cache, path);
      std::vector<uint32_t> ids(c.nq * o.k);
      std::vector<float> d(c.nq * o.k);
      const search_counts n = index.search(c.queries.data(), c.nq, o, ids.data(), d.data(), 4);
      EXPECT_EQ(n.bad_ids, 0u);
      return recall_at(10, ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
    };
    const double at_once = recall(c.index.path()), in_shards = recall(sharded.path());
    std::printf("  %s: recall@10 %.3f at once, %.3f in %u shards\n", metric_name(sh.m), at_once, in_shards, r.shards);
    EXPECT_GE(in_shards, 0.85) << "recall@10 " << in_shards;
    EXPECT_GE(in_shards, at_once - 0.03) << "at once " << at_once << ", in shards " << in_shards;
    if (sh.m != metric::l2) continue;
    // One thread writes the same bytes.
    scratch_file again("sharded-again.dwv");
    so.threads = 1;
    build_index(c.base, sh.m, again.path(), so);
    EXPECT_EQ(file_bytes(sharded.path()), file_bytes(again.path()));
    // Stopped after the quantiser and the first shard: resumed, the same file.
    scratch_file resumed("sharded-resumed.dwv");
    uint32_t calls = 0;
    so.keep_going = [&] { return ++calls < 2; };
    EXPECT_THROW(build_index(c.base, sh.m, resumed.path(), so), error);
    so.keep_going = nullptr;
    EXPECT_EQ(build_index(c.base, sh.m, resumed.path(), so).resumed_phases, 2u);
    EXPECT_EQ(file_bytes(sharded.path()), file_bytes(resumed.path()));
    // Killed after the third shard, with no stop to save on (a shard's save
    // may have been skipped): resumed from whatever state was kept, the same file.
    scratch_file killed("sharded-killed.dwv");
    calls = 0;
    so.keep_going = [&]() -> bool {
      if (++calls == 4) throw std::runtime_error("killed");
      return true;
    };
    EXPECT_THROW(build_index(c.base, sh.m, killed.path(), so), std::runtime_error);
    so.keep_going = nullptr;
    const uint32_t kept = build_index(c.base, sh.m, killed.path(), so).resumed_phases;
    EXPECT_GE(kept, 1u);
    EXPECT_LE(kept, 4u);
    EXPECT_EQ(file_bytes(sharded.path()), file_bytes(killed.path()));
    so.threads = 3;
    // Another shard size does not take that state.
    EXPECT_THROW(build_index(c.base, sh.m, resumed.path(), [&] {
                   build_options x = so;
                   x.keep_going = [] { return false; };
                   return x;
                 }()),
                 error);
    so.shard_vectors = 2 * min_shard_vectors;
    EXPECT_EQ(build_index(c.base, sh.m, resumed.path(), so).resumed_phases, 0u);
  }
}

TEST(VectorSearch, BadOptionsAreRefusedByName) {
  const vectors_case c(500, 16, vector_type::f32, metric::l2, 3);
  auto expect_error = [&](search_options o, const char* words) {
    try {
      run(c, o, 1);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  search_options o;
  o.k = 501;
  expect_error(o, "larger than the index's 500 vectors");
  o = {};
  o.k = 0;
  expect_error(o, "k must be at least 1");
  o = {};
  o.list = 5;
  expect_error(o, "must be >= k");
  o = {};
  o.width = 0;
  expect_error(o, "width");
  o = {};
  o.entry_sample = max_entry_sample + 1;
  expect_error(o, "entry_sample at most 65536");

  auto cache = make_host_page_cache(embedded_link(), small_cache(16));
  vector_index index(cache, c.index.path());
  std::vector<float> q(c.queries);
  q[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint32_t> ids(3 * 10);
  std::vector<float> d(3 * 10);
  EXPECT_THROW(index.search(q.data(), 3, search_options{}, ids.data(), d.data()), error);

  // Building: a NaN, a degree past the limit, subspaces that do not divide.
  std::vector<float> bad(100 * 8, 1.0f);
  bad[77] = std::numeric_limits<float>::infinity();
  scratch_file out("bad.dwv");
  EXPECT_THROW(build_index(vector_set{reinterpret_cast<const uint8_t*>(bad.data()), 100, 8, vector_type::f32},
                           metric::l2, out.path()),
               error);
  build_options bo;
  bo.degree = 300;
  EXPECT_THROW(build_index(c.base, metric::l2, out.path(), bo), error);
  bo = {};
  bo.pq_subspaces = 5;
  EXPECT_THROW(build_index(c.base, metric::l2, out.path(), bo), error);
  bo = {};
  bo.shard_vectors = 100;
  try {
    build_index(c.base, metric::l2, out.path(), bo);
    ADD_FAILURE() << "shards of 100 accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("shard_vectors 100 (0, or at least 1024)"), std::string::npos) << e.what();
  }
}

TEST(VectorSearch, DamagedFilesAreRefusedByName) {
  const vectors_case c(1500, 32, vector_type::f32, metric::l2, 20);
  const index_header h = index_file(c.index.path()).header();
  auto open_error = [&](const std::string& path) -> std::string {
    try {
      auto cache = make_host_page_cache(embedded_link(), small_cache(16));
      vector_index index(cache, path);
      return "";
    } catch (const error& e) {
      return e.what();
    }
  };
  {  // A header byte.
    scratch_file f("hdr.dwv");
    std::ofstream(f.path(), std::ios::binary) << std::string(reinterpret_cast<const char*>(file_bytes(c.index.path()).data()),
                                                              file_bytes(c.index.path()).size());
    flip_byte(f.path(), 40);
    EXPECT_NE(open_error(f.path()).find("header does not match its checksum"), std::string::npos) << open_error(f.path());
  }
  {  // A code byte: refused at open (the codes are read and checked there).
    const std::vector<uint8_t> all = file_bytes(c.index.path());
    scratch_file f("codes.dwv");
    std::ofstream(f.path(), std::ios::binary).write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size()));
    flip_byte(f.path(), h.codes_at + 100);
    EXPECT_NE(open_error(f.path()).find("codes"), std::string::npos) << open_error(f.path());
  }
  {  // Truncated.
    const std::vector<uint8_t> all = file_bytes(c.index.path());
    scratch_file f("short.dwv");
    std::ofstream(f.path(), std::ios::binary).write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size() / 2));
    EXPECT_NE(open_error(f.path()).find("past the end of the file"), std::string::npos) << open_error(f.path());
  }
  {  // A record byte: the open succeeds, the search that reads it fails by name.
    const std::vector<uint8_t> all = file_bytes(c.index.path());
    scratch_file f("rec.dwv");
    std::ofstream(f.path(), std::ios::binary).write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size()));
    flip_byte(f.path(), h.records_at + record_offset(h, h.entry) + 8);  // the entry's record: every query reads it
    auto cache = make_host_page_cache(embedded_link(), small_cache(16));
    vector_index index(cache, f.path());
    std::vector<uint32_t> ids(c.nq * 10);
    std::vector<float> d(c.nq * 10);
    search_options from_the_entry;
    from_the_entry.entry_sample = 0;  // each query's first fetch is the entry's page
    try {
      index.search(c.queries.data(), c.nq, from_the_entry, ids.data(), d.data());
      ADD_FAILURE() << "a damaged record was searched";
    } catch (const data_error& e) {
      // Named by its row in the vectors (the label), as results are.
      const uint32_t row = index_file(c.index.path()).read_labels()[h.entry];
      EXPECT_NE(std::string(e.what()).find("node " + std::to_string(row)), std::string::npos) << e.what();
    }
  }
  {  // A label byte: refused at open.
    const std::vector<uint8_t> all = file_bytes(c.index.path());
    scratch_file f("labels.dwv");
    std::ofstream(f.path(), std::ios::binary).write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size()));
    flip_byte(f.path(), h.labels_at + 6);
    EXPECT_NE(open_error(f.path()).find("labels"), std::string::npos) << open_error(f.path());
  }
  {  // A file that is no index.
    scratch_file f("none.dwv");
    std::ofstream(f.path(), std::ios::binary) << std::string(8192, 'x');
    EXPECT_NE(open_error(f.path()).find("not a deepwell vector index"), std::string::npos);
  }
}

// Records laid out a page a neighbourhood: a search through a small cache
// reads fewer pages than with the rows' order, and answers with the same
// rows (labels), at the same recall.
TEST(VectorSearch, NeighbourhoodPagesCutTheReadsASearchMakes) {
  build_options bo;
  bo.degree = 16;
  bo.list = 32;
  bo.resume = false;
  const vectors_case c(test::scale_div > 1 ? 3000 : 6000, 16, vector_type::f32, metric::l2, 100, bo);
  scratch_file by_row("by_row.dwv");
  bo.layout = record_layout::by_row;
  build_index(c.base, metric::l2, by_row.path(), bo);
  const std::vector<uint32_t> identity = index_file(by_row.path()).read_labels();
  for (uint32_t i = 0; i < identity.size(); ++i) ASSERT_EQ(identity[i], i);
  std::vector<uint32_t> sorted = index_file(c.index.path()).read_labels();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);  // a permutation of the rows
  search_options o;
  o.k = 10;
  o.list = 48;
  auto reads = [&](const std::string& path, double& recall) {
    auto cache = make_host_page_cache(embedded_link(), small_cache(32));
    vector_index index(cache, path);
    std::vector<uint32_t> ids(c.nq * o.k);
    std::vector<float> d(c.nq * o.k);
    cache->reset_stats();
    index.search(c.queries.data(), c.nq, o, ids.data(), d.data(), 1);
    recall = recall_at(10, ids.data(), 10, c.truth_ids.data(), c.truth_k, c.nq);
    return cache->stats().misses;
  };
  double near_recall = 0, row_recall = 0;
  const uint64_t near = reads(c.index.path(), near_recall), rows = reads(by_row.path(), row_recall);
  std::printf("  page reads: %llu by neighbourhood, %llu by row; recall %.3f and %.3f\n", (unsigned long long)near,
              (unsigned long long)rows, near_recall, row_recall);
  EXPECT_LT(double(near), 0.8 * double(rows));
  EXPECT_GE(near_recall, 0.9);
  EXPECT_NEAR(near_recall, row_recall, 0.02);
}

TEST(VectorData, BinFilesRoundTripAndBadOnesAreRefused) {
  vectors::mixture_options mo;
  mo.count = 100;
  mo.dim = 12;
  mo.type = vector_type::u8;
  const std::vector<uint8_t> rows = generate_mixture(mo, 0, 100);
  // Rows are generated independently: a slice equals the same rows of the whole.
  const std::vector<uint8_t> tail = generate_mixture(mo, 60, 40);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), rows.begin() + 60 * 12));
  scratch_file f("v.u8bin");
  write_vector_file(f.path(), vector_set{rows.data(), 100, 12, vector_type::u8});
  EXPECT_EQ(type_from_name(f.path()), vector_type::u8);
  {
    vector_file v(f.path(), vector_type::u8);
    EXPECT_EQ(v.set().count, 100u);
    EXPECT_EQ(0, std::memcmp(v.set().data, rows.data(), rows.size()));
  }
  EXPECT_THROW(vector_file(f.path(), vector_type::f32), error);  // the size says another type
  EXPECT_THROW(type_from_name("x.npy"), error);
}
