// File: tools/heddle-nuwa/nuwa_cli.h
//
// heddle-nuwa: compile fabric descriptions (docs/nuwa.md §1) into forwarding artifacts and look
// inside them. A thin main() calls Main(); everything else lives here so tests can run the
// commands in-process with string streams.
//
//   heddle-nuwa compile FABRIC.yaml -o DIR
//   heddle-nuwa show ARTIFACT [--json]  |  show --fabric F --node N [--json]
//   heddle-nuwa query (--fabric F | --artifacts DIR) --node N --dst ADDR [--json]
//   heddle-nuwa diff A B                (two artifacts, two artifact directories, two fabrics)
//   heddle-nuwa verify --fabric F [--sample N] [--seed S]
//
// Exit codes: 0 success; 1 `verify` found a mismatch or `diff` found a difference; 2 bad input
// (usage, a file that does not parse or decode, a node or address that does not exist).
#pragma once

#include <ostream>

namespace heddle::nuwa::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDiffers = 1;
inline constexpr int kExitBadInput = 2;

int Main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace heddle::nuwa::cli
