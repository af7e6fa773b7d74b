// File: tools/heddlectl/units_test.cc
#include "tools/heddlectl/units.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::api::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseSizeTest, AcceptsBytesAndBinarySuffixes) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"4096", 4096},        {"4K", 4096},
      {"4k", 4096},          {"4KiB", 4096},
      {"4kib", 4096},        {"64K", 65536},
      {"1M", 1048576},       {"1MiB", 1048576},
      {"2G", 2147483648},    {"1GiB", 1073741824},
      {"1T", 1099511627776}, {"512B", 512},
      {" 8 KiB ", 8192},     {"0", 0},
  };
  for (const auto& [text, bytes] : cases) {
    absl::StatusOr<uint64_t> size = ParseSize(text);
    ASSERT_TRUE(size.ok()) << text << ": " << size.status();
    EXPECT_EQ(*size, bytes) << text;
  }
}

TEST(ParseSizeTest, RefusesWhatIsNotASize) {
  for (const char* text : {"", "K", "4X", "4Ki", "-4K", "4.5K", "1e3", "4KiBs"}) {
    absl::StatusOr<uint64_t> size = ParseSize(text);
    ASSERT_FALSE(size.ok()) << text;
    EXPECT_THAT(size.status().message(), HasSubstr("4096, 4K, 4KiB, 1M, 1MiB")) << text;
  }
}

TEST(ParseSizeTest, RefusesDecimalLookingSuffixesAndOverflow) {
  absl::StatusOr<uint64_t> kb = ParseSize("4KB");
  ASSERT_FALSE(kb.ok());
  EXPECT_THAT(kb.status().message(), HasSubstr("ambiguous: write 4K or 4KiB"));
  EXPECT_FALSE(ParseSize("1MB").ok());
  EXPECT_THAT(ParseSize("16777216T").status().message(), HasSubstr("too large"));
  EXPECT_THAT(ParseSize("99999999999999999999").status().message(), HasSubstr("too large"));
  EXPECT_TRUE(ParseSize("16777215T").ok());
}

TEST(ParseSizeListTest, SplitsOnCommas) {
  absl::StatusOr<std::vector<uint64_t>> list = ParseSizeList("4K, 64KiB,1M");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre(4096u, 65536u, 1048576u));
  list = ParseSizeList("");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  EXPECT_FALSE(ParseSizeList("4K,,1M").ok());
  EXPECT_THAT(ParseSizeList("4K,oops").status().message(), HasSubstr("size \"oops\""));
}

TEST(ParseIntListTest, ChecksRangeAndKeep) {
  absl::StatusOr<std::vector<int64_t>> dscp = ParseIntList("0,10,18,46", 0, 63, "dscp");
  ASSERT_TRUE(dscp.ok()) << dscp.status();
  EXPECT_THAT(*dscp, ElementsAre(0, 10, 18, 46));
  absl::StatusOr<std::vector<int64_t>> bad = ParseIntList("0,64", 0, 63, "dscp");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "dscp \"64\": each value must be an integer in 0..63");
  EXPECT_FALSE(ParseIntList("1,x", 0, 63, "dscp").ok());
  EXPECT_FALSE(ParseIntList("keep", 0, 63, "dscp").ok());

  const int64_t keep = -1;
  absl::StatusOr<std::vector<int64_t>> pcp = ParseIntList("-1,keep,3,7", -1, 7, "pcp", &keep);
  ASSERT_TRUE(pcp.ok()) << pcp.status();
  EXPECT_THAT(*pcp, ElementsAre(-1, -1, 3, 7));
  EXPECT_THAT(ParseIntList("-2", -1, 7, "pcp", &keep).status().message(),
              HasSubstr("integer in -1..7 (or keep)"));
}

TEST(FormatSizeTest, PicksTheLargestUnit) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(100), "100 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
  EXPECT_EQ(FormatSize(4096), "4 KiB");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(65536), "64 KiB");
  EXPECT_EQ(FormatSize(1048576), "1 MiB");
  EXPECT_EQ(FormatSize(16777216), "16 MiB");
  EXPECT_EQ(FormatSize(3221225472), "3 GiB");
}

TEST(FormatRangeTest, BoundsAndOpenEnds) {
  EXPECT_EQ(FormatRange(0, 4096), "≤ 4 KiB");
  EXPECT_EQ(FormatRange(4096, 65536), "4 KiB–64 KiB");
  EXPECT_EQ(FormatRange(1048576, 0), "> 1 MiB");
  EXPECT_EQ(FormatRange(0, 0), "any");
}

}  // namespace
}  // namespace heddle::api::cli
