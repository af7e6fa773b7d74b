// File: tools/heddlectl/table.cc
#include "tools/heddlectl/table.h"

#include <algorithm>

namespace heddle::api::cli {
namespace {

constexpr char kGap[] = "  ";

void AppendLine(const std::vector<std::string>& cells, const std::vector<size_t>& widths,
                const std::vector<Table::Column>& columns, std::string* out) {
  std::string line;
  for (size_t i = 0; i < columns.size(); ++i) {
    const std::string& cell = i < cells.size() ? cells[i] : std::string();
    const size_t pad = widths[i] - DisplayWidth(cell);
    if (i > 0) line += kGap;
    if (columns[i].align == Table::kRight) {
      line.append(pad, ' ');
      line += cell;
    } else {
      line += cell;
      line.append(pad, ' ');
    }
  }
  line.erase(line.find_last_not_of(' ') + 1);
  *out += line;
  *out += '\n';
}

}  // namespace

size_t DisplayWidth(const std::string& s) {
  size_t width = 0;
  for (unsigned char c : s) width += (c & 0xC0) != 0x80;  // count every byte but continuations
  return width;
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(std::min(cells.size(), columns_.size()));
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths(columns_.size());
  std::vector<std::string> header;
  for (size_t i = 0; i < columns_.size(); ++i) {
    widths[i] = DisplayWidth(columns_[i].header);
    header.push_back(columns_[i].header);
  }
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out;
  AppendLine(header, widths, columns_, &out);
  for (const auto& row : rows_) AppendLine(row, widths, columns_, &out);
  return out;
}

std::string RenderKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs) {
  size_t width = 0;
  for (const auto& [key, value] : pairs) width = std::max(width, key.size() + 1);
  std::string out;
  for (const auto& [key, value] : pairs) {
    std::string line = key + ":";
    line.append(width - line.size(), ' ');
    line += kGap;
    line += value;
    line.erase(line.find_last_not_of(' ') + 1);
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace heddle::api::cli
