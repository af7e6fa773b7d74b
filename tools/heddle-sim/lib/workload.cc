#include "tools/heddle-sim/lib/workload.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace heddle::sim {

absl::StatusOr<OpMix> ParseOpMix(std::string_view text) {
  OpMix m{0, 0, 0};
  bool seen[3] = {false, false, false};
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const std::vector<absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    double v = 0;
    const absl::string_view name = absl::StripAsciiWhitespace(kv[0]);
    const int i = name == "write" ? 0 : name == "send" ? 1 : name == "read" ? 2 : -1;
    if (kv.size() != 2 || i < 0 || seen[i] ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(kv[1]), &v) || !(v >= 0) || !(v < 1e9)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ops ", std::string(text), ": at \"", part,
                       "\"; give write=W,send=S,read=R with shares >= 0, each at most once"));
    }
    seen[i] = true;
    (i == 0 ? m.write : i == 1 ? m.send : m.read) = v;
  }
  if (!(m.write + m.send + m.read > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ops ", std::string(text), ": the shares are all 0"));
  }
  return m;
}

absl::StatusOr<Cdf> Cdf::Make(std::vector<std::pair<double, double>> points, std::string name) {
  if (points.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": a CDF needs at least two points (one at 0 %, one at 100 %)"));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [x, p] = points[i];
    if (!(x >= 0) || !(p >= 0) || !(p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": point ", i + 1, " (", x, ", ", p * 100, " %) is out of range"));
    }
    if (i > 0 && (x < points[i - 1].first || p < points[i - 1].second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": point ", i + 1, " goes backwards; sizes and percentages must not decrease"));
    }
  }
  if (points.front().second != 0 || points.back().second != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the first point must be at 0 % and the last at 100 %"));
  }
  Cdf c;
  c.points_ = std::move(points);
  c.name_ = std::move(name);
  for (size_t i = 1; i < c.points_.size(); ++i) {
    const double prob = c.points_[i].second - c.points_[i - 1].second;
    c.mean_ += prob * (c.points_[i].first + c.points_[i - 1].first) / 2;
  }
  return c;
}

uint64_t Cdf::Sample(Rng& rng) const {
  const double u = rng.Uniform();
  size_t i = 1;
  while (i + 1 < points_.size() && u >= points_[i].second) ++i;
  const auto [x0, p0] = points_[i - 1];
  const auto [x1, p1] = points_[i];
  const double x = p1 > p0 ? x0 + (x1 - x0) * (u - p0) / (p1 - p0) : x1;
  const auto size = static_cast<uint64_t>(x + 0.5);
  return size < 1 ? 1 : size;
}

absl::StatusOr<Cdf> ParseCdf(std::string_view text_in, std::string_view what_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  const absl::string_view what(what_in.data(), what_in.size());
  std::vector<std::pair<double, double>> points;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double x, p;
    if (f.size() != 2 || !absl::SimpleAtod(f[0], &x) || !absl::SimpleAtod(f[1], &p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ":", line_no, ": expected \"size_bytes cumulative_percent\", got \"", line, "\""));
    }
    points.emplace_back(x, p / 100);
  }
  return Cdf::Make(std::move(points), std::string(what));
}

absl::StatusOr<Cdf> LoadCdfFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read CDF file ", path,
                                            "; give websearch, hadoop, alistorage, googlerpc "
                                            "or the path of a CDF file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseCdf(ss.str(), path);
}

std::string DataDir() {
  if (const char* d = std::getenv("HEDDLE_SIM_DATA_DIR"); d != nullptr && *d != '\0') return d;
  return HEDDLE_SIM_DATA_DIR;
}

absl::StatusOr<Cdf> LoadNamedCdf(std::string_view name) {
  for (std::string_view known : {"websearch", "hadoop", "alistorage", "googlerpc"}) {
    if (name == known) {
      absl::StatusOr<Cdf> c = LoadCdfFile(DataDir() + "/" + std::string(name) + ".cdf");
      if (!c.ok()) return c.status();
      return Cdf::Make(c->points(), std::string(name));
    }
  }
  return LoadCdfFile(std::string(name));
}

}  // namespace heddle::sim
