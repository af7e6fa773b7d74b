#include "tools/heddle-sim/lib/workload.h"

#include "gtest/gtest.h"

namespace heddle::sim {
namespace {

TEST(CdfTest, BuiltinsLoadWithTheirPublishedMeans) {
  // Means of the tables as piecewise-uniform distributions.
  for (const auto& [name, lo, hi] :
       {std::tuple{"websearch", 1.6e6, 1.8e6}, std::tuple{"hadoop", 0.1e6, 0.2e6},
        std::tuple{"alistorage", 0.03e6, 0.05e6}, std::tuple{"googlerpc", 1e3, 1e4}}) {
    absl::StatusOr<Cdf> c = LoadNamedCdf(name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_GT(c->Mean(), lo) << name;
    EXPECT_LT(c->Mean(), hi) << name;
  }
}

TEST(CdfTest, SampleMeanMatchesTheCdfMean) {
  absl::StatusOr<Cdf> c = LoadNamedCdf("alistorage");
  ASSERT_TRUE(c.ok());
  Rng rng(11);
  double sum = 0;
  constexpr int kN = 400000;
  for (int i = 0; i < kN; ++i) sum += static_cast<double>(c->Sample(rng));
  EXPECT_NEAR(sum / kN, c->Mean(), 0.02 * c->Mean());
}

TEST(CdfTest, BadFilesAreClearErrors) {
  EXPECT_FALSE(ParseCdf("0 0\n10 50\n5 100\n", "x").ok());  // backwards
  EXPECT_FALSE(ParseCdf("0 10\n10 100\n", "x").ok());       // no 0 %
  EXPECT_FALSE(ParseCdf("0 0\n10 90\n", "x").ok());         // no 100 %
  absl::StatusOr<Cdf> bad = ParseCdf("0 0\n10 fifty\n", "w.cdf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("w.cdf:2"), std::string::npos) << bad.status();
  EXPECT_FALSE(LoadNamedCdf("/nonexistent/file.cdf").ok());
  EXPECT_TRUE(ParseCdf("# comment\n0 0\n\n100 100 # end\n", "ok").ok());
}

}  // namespace
}  // namespace heddle::sim
