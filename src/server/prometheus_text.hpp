// Prometheus's text exposition format (version 0.0.4), written: families
// (HELP and TYPE, once each, before their samples), samples with labels,
// names checked and label values escaped as the format says. The server's
// /metrics (metrics_http.hpp) serves what server::prometheus() writes
// with it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepwell::server {

using metric_labels = std::vector<std::pair<std::string, std::string>>;

class prometheus_text {
 public:
  // A family: its name ([a-zA-Z_:][a-zA-Z0-9_:]*), type (counter, gauge,
  // histogram, summary or untyped) and help. Throws deepwell::error for a
  // bad name or type, or a family declared twice (a bug, not input).
  void family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the last family declared: `name` is the family's, or for a
  // histogram the family's with _bucket, _sum or _count. Label names are
  // checked like metric names (no colon, no leading "__"); values escaped.
  void sample(std::string_view name, const metric_labels& labels, uint64_t value);
  void sample(std::string_view name, const metric_labels& labels, double value);
  // A family of one sample without labels.
  void single(std::string_view name, std::string_view type, std::string_view help, uint64_t value) {
    family(name, type, help);
    sample(name, {}, value);
  }
  // A histogram's samples from cumulative-ready buckets: bucket i counts
  // observations up to bounds[i] (not cumulated yet); +Inf, _sum, _count.
  void histogram(std::string_view name, const metric_labels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum);

  const std::string& text() const { return out_; }

 private:
  void sample_text(std::string_view name, const metric_labels& labels, const std::string& value);
  std::string out_;
  std::string family_, type_;
  std::vector<std::string> declared_;
};

// The format's escapes: a label value's backslash, double quote and
// newline; a help text's backslash and newline.
std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);

}  // namespace deepwell::server
