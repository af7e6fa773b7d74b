// File: tools/heddlectl/table.h
//
// Plain-text tables for heddlectl's human-readable output: a header row, columns padded to the
// widest cell, two spaces between columns, numbers right-aligned, no trailing spaces.
//
//   Table t({{"PORT"}, {"RX-PKTS", Table::kRight}});
//   t.AddRow({"host0", "1000"});
//   std::cout << t.Render();
//
// Widths count UTF-8 code points, so cells may hold "≤" or "–"; wide (East Asian) characters and
// combining marks are not expected.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace heddle::api::cli {

class Table {
 public:
  enum Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = kLeft;
  };

  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // Missing trailing cells render empty; extra cells are an error in the caller and are dropped.
  void AddRow(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }

  // Header plus one line per row, each ending in '\n'.
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Display width of a UTF-8 string: the number of code points.
size_t DisplayWidth(const std::string& s);

// "key:   value" lines with the values aligned, for single-object summaries.
std::string RenderKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace heddle::api::cli
