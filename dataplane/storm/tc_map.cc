#include "dataplane/storm/tc_map.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace heddle::storm {

absl::StatusOr<TcMap> MapLevelsToTcs(const LevelConfig& c) {
  const int k = c.levels;
  if (k < 1 || k > kMaxLevels) {
    return absl::InvalidArgumentError(
        absl::StrCat("storm.levels: ", k, " is out of range; use 1..", kMaxLevels));
  }
  int with_pcp = 0, first_without = -1, first_with = -1;
  for (int l = 0; l < k; ++l) {
    if (c.pcp[l] >= 0) {
      ++with_pcp;
      if (first_with < 0) first_with = l;
    } else if (first_without < 0) {
      first_without = l;
    }
  }
  TcMap m;
  if (with_pcp == 0) {
    m.nb_tcs = k <= 4 ? 4 : 8;
    for (int l = 0; l < kMaxLevels; ++l) {
      m.level_tc[l] = static_cast<uint8_t>(std::min(l, std::min(k, int{m.nb_tcs}) - 1));
    }
    for (int p = 0; p < 8; ++p) m.prio_tc[p] = static_cast<uint8_t>(p * m.nb_tcs / 8);
    return m;
  }
  if (with_pcp != k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storm.pcp: level ", first_with, " has PCP ", c.pcp[first_with], " but level ",
        first_without,
        " has none (-1); with storm.egress dcb or auto a level's traffic class follows its PCP, "
        "so give every level a PCP or none"));
  }
  for (int l = 1; l < k; ++l) {
    if (c.pcp[l] < c.pcp[l - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.pcp: level ", l, " has PCP ", c.pcp[l], ", below level ", l - 1, "'s PCP ",
          c.pcp[l - 1],
          "; with storm.egress dcb or auto a level's traffic class follows its PCP and a higher "
          "level needs a PCP at least as high"));
    }
  }
  std::vector<int> distinct;
  for (int l = 0; l < k; ++l) {
    if (distinct.empty() || distinct.back() != c.pcp[l]) distinct.push_back(c.pcp[l]);
  }
  m.by_pcp = true;
  m.nb_tcs = distinct.size() <= 4 ? 4 : 8;
  auto rank = [&](int pcp) {
    return static_cast<uint8_t>(std::find(distinct.begin(), distinct.end(), pcp) -
                                distinct.begin());
  };
  for (int l = 0; l < kMaxLevels; ++l) m.level_tc[l] = rank(c.pcp[std::min(l, k - 1)]);
  for (int p = 0; p < 8; ++p) {
    uint8_t tc = 0;
    for (size_t i = 0; i < distinct.size(); ++i) {
      if (distinct[i] <= p) tc = static_cast<uint8_t>(i);
    }
    m.prio_tc[p] = tc;
  }
  return m;
}

}  // namespace heddle::storm
