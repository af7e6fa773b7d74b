// File: tools/heddlectl/table_test.cc
#include "tools/heddlectl/table.h"

#include "gtest/gtest.h"

namespace heddle::api::cli {
namespace {

TEST(TableTest, PadsToWidestCellAndAlignsNumbersRight) {
  Table t({{"PORT"}, {"RX-PKTS", Table::kRight}, {"LINK"}});
  t.AddRow({"host0", "1000", "up"});
  t.AddRow({"uplink0", "5", "down"});
  EXPECT_EQ(t.Render(),
            "PORT     RX-PKTS  LINK\n"
            "host0       1000  up\n"
            "uplink0        5  down\n");
}

TEST(TableTest, HeaderOnlyWhenNoRows) {
  Table t({{"A"}, {"BB", Table::kRight}});
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.Render(), "A  BB\n");
}

TEST(TableTest, ShortRowsPadAndLongRowsAreCut) {
  Table t({{"A"}, {"B"}, {"C"}});
  t.AddRow({"x"});
  t.AddRow({"1", "2", "3", "extra"});
  EXPECT_EQ(t.Render(),
            "A  B  C\n"
            "x\n"
            "1  2  3\n");
}

TEST(TableTest, NoTrailingSpacesWhenLastColumnIsNarrow) {
  Table t({{"NAME"}, {"NOTE"}});
  t.AddRow({"a-long-name", ""});
  EXPECT_EQ(t.Render(),
            "NAME         NOTE\n"
            "a-long-name\n");
}

TEST(TableTest, WidthsCountCodePointsNotBytes) {
  Table t({{"RANGE"}, {"N", Table::kRight}});
  t.AddRow({"≤ 4 KiB", "1"});
  t.AddRow({"4 KiB–64 KiB", "22"});
  t.AddRow({"> 1 MiB", "333"});
  EXPECT_EQ(t.Render(),
            "RANGE           N\n"
            "≤ 4 KiB         1\n"
            "4 KiB–64 KiB   22\n"
            "> 1 MiB       333\n");
  EXPECT_EQ(DisplayWidth("4 KiB–64 KiB"), 12u);
}

TEST(RenderKeyValuesTest, AlignsValues) {
  EXPECT_EQ(RenderKeyValues({{"version", "0.1.0"}, {"pid", "42"}, {"metrics", ""}}),
            "version:  0.1.0\n"
            "pid:      42\n"
            "metrics:\n");
}

}  // namespace
}  // namespace heddle::api::cli
