// prometheus_text.hpp.
#include "prometheus_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "deepwell/common/error.hpp"

namespace deepwell::server {

namespace {

bool valid_name(std::string_view n, bool colon) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string escape_help(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void prometheus_text::family(std::string_view name, std::string_view type, std::string_view help) {
  if (!valid_name(name, true)) throw error("prometheus: '" + std::string(name) + "' is not a metric name");
  static constexpr std::string_view types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
  if (std::find(std::begin(types), std::end(types), type) == std::end(types))
    throw error("prometheus: '" + std::string(type) + "' is not a metric type");
  if (std::find(declared_.begin(), declared_.end(), name) != declared_.end())
    throw error("prometheus: the family " + std::string(name) + " is declared twice");
  declared_.emplace_back(name);
  family_ = name;
  type_ = type;
  out_ += "# HELP " + family_ + " " + escape_help(help) + "\n# TYPE " + family_ + " " + type_ + "\n";
}

void prometheus_text::sample_text(std::string_view name, const metric_labels& labels, const std::string& value) {
  const bool own = name == family_ ||
                   (type_ == "histogram" && (name == family_ + "_bucket" || name == family_ + "_sum" || name == family_ + "_count"));
  if (family_.empty() || !own)
    throw error("prometheus: a sample " + std::string(name) + " outside its family (" + family_ + ")");
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      const std::string& k = labels[i].first;
      if (!valid_name(k, false) || k.rfind("__", 0) == 0) throw error("prometheus: '" + k + "' is not a label name");
      out_ += (i ? "," : "") + k + "=\"" + escape_label_value(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void prometheus_text::sample(std::string_view name, const metric_labels& labels, uint64_t value) {
  sample_text(name, labels, std::to_string(value));
}

void prometheus_text::sample(std::string_view name, const metric_labels& labels, double value) {
  sample_text(name, labels, number(value));
}

void prometheus_text::histogram(std::string_view name, const metric_labels& labels, const std::vector<double>& bounds,
                                const std::vector<uint64_t>& counts, double sum) {
  if (bounds.size() != counts.size()) throw error("prometheus: a histogram's bounds and counts differ in number");
  if (type_ != "histogram" || name != family_) throw error("prometheus: " + std::string(name) + " is not the histogram declared");
  const std::string base(name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (i && !(bounds[i] > bounds[i - 1])) throw error("prometheus: a histogram's bounds must rise");
    cumulative += counts[i];
    metric_labels l = labels;
    l.emplace_back("le", number(bounds[i]));
    sample(base + "_bucket", l, cumulative);
  }
  metric_labels inf = labels;
  inf.emplace_back("le", "+Inf");
  sample(base + "_bucket", inf, cumulative);
  sample(base + "_sum", labels, sum);
  sample(base + "_count", labels, cumulative);
}

}  // namespace deepwell::server
