// The server's metrics in Prometheus's text format (src/server/
// prometheus_text.hpp): names checked, values escaped, histograms whole;
// and the checker the server's own output is held to (prometheus_format.hpp)
// shown to refuse what a scraper would.
#include <gtest/gtest.h>

#include <string>

#include "deepwell/common/error.hpp"
#include "prometheus_format.hpp"
#include "server/prometheus_text.hpp"
#include "test_util.hpp"

using namespace deepwell;
using deepwell::server::prometheus_text;

TEST(PrometheusText, ValuesAreEscapedAndNamesChecked) {
  prometheus_text o;
  o.family("deepwell_things_total", "counter", "Things\\counted,\nall of them.");
  o.sample("deepwell_things_total", {{"name", "a \"quoted\"\\back\nslash"}}, uint64_t(7));
  EXPECT_EQ(o.text(),
            "# HELP deepwell_things_total Things\\\\counted,\\nall of them.\n"
            "# TYPE deepwell_things_total counter\n"
            "deepwell_things_total{name=\"a \\\"quoted\\\"\\\\back\\nslash\"} 7\n");
  EXPECT_EQ(test::exposition_problem(o.text()), "");
  test::expect_error([&] { o.family("1bad", "counter", ""); }, "not a metric name");
  test::expect_error([&] { o.family("deepwell_x", "meter", ""); }, "not a metric type");
  test::expect_error([&] { o.family("deepwell_things_total", "counter", ""); }, "declared twice");
  test::expect_error([&] { o.sample("deepwell_other", {}, uint64_t(1)); }, "outside its family");
  test::expect_error([&] { o.sample("deepwell_things_total", {{"__reserved", "x"}}, uint64_t(1)); }, "not a label name");
  test::expect_error([&] { o.sample("deepwell_things_total", {{"a:b", "x"}}, uint64_t(1)); }, "not a label name");
}

TEST(PrometheusText, AHistogramIsCumulativeWithInfSumAndCount) {
  prometheus_text o;
  o.family("deepwell_latency_seconds", "histogram", "Latency.");
  o.histogram("deepwell_latency_seconds", {{"client", "1"}}, {1e-6, 2e-6, 4e-6}, {3, 0, 2}, 9.5e-6);
  const std::string t = o.text();
  EXPECT_NE(t.find("deepwell_latency_seconds_bucket{client=\"1\",le=\"1.9999999999999999e-06\"} 3"), std::string::npos) << t;
  EXPECT_NE(t.find("deepwell_latency_seconds_bucket{client=\"1\",le=\"+Inf\"} 5"), std::string::npos) << t;
  EXPECT_NE(t.find("deepwell_latency_seconds_count{client=\"1\"} 5"), std::string::npos) << t;
  EXPECT_NE(t.find("deepwell_latency_seconds_sum{client=\"1\"} 9.5"), std::string::npos) << t;
  EXPECT_EQ(test::exposition_problem(t), "") << t;
  test::expect_error([&] { o.histogram("deepwell_latency_seconds", {}, {2e-6, 1e-6}, {1, 1}, 0); }, "must rise");
}

TEST(PrometheusText, TheCheckerRefusesWhatAScraperWould) {
  const std::string head = "# HELP h H.\n# TYPE h histogram\n";
  EXPECT_EQ(test::exposition_problem(head + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"), "");
  EXPECT_NE(test::exposition_problem(head + "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n"), "");
  EXPECT_NE(test::exposition_problem(head + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n"), "");  // no _sum
  EXPECT_NE(test::exposition_problem(head + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n"), "");  // no +Inf
  EXPECT_NE(test::exposition_problem("c 1\n# TYPE c counter\n"), "");                      // a sample before TYPE
  EXPECT_NE(test::exposition_problem("# TYPE c counter\nc{a=\"x\ny\"} 1\n"), "");          // a raw newline
  EXPECT_NE(test::exposition_problem("# TYPE c counter\nc{a=\"x\"} one\n"), "");           // not a number
  EXPECT_NE(test::exposition_problem("# TYPE c counter\n# TYPE c counter\n"), "");         // TYPE twice
}
