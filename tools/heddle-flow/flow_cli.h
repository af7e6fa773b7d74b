// File: tools/heddle-flow/flow_cli.h
//
// heddle-flow: OptiFlow's command line (docs/optiflow-schedule.md §4) — intent in, verified
// schedule out. A thin main() calls Main(); everything lives here so tests can run the commands
// in-process with string streams.
//
//   heddle-flow compile --topology T.yaml (--intent I.flow | --builtin ring) [--collective KIND]
//                       [--param k=v]... [--order a,b,c] [--chunks K] [--slot-bytes N] [--pieces P]
//                       [-o schedule.json] [-j]
//   heddle-flow verify schedule.json [-j]
//   heddle-flow check --intent I.flow --ranks N [--param k=v]... [--diagnostics json|text]
//   heddle-flow synthesize --topology T.yaml --collective KIND [--budget B] [--seed S]
//                          [--proposer 'cmd' [--rounds R] [--proposer-timeout S]] [-o F] [-j]
//   heddle-flow builtins [--show NAME --collective KIND] [-j]
//   heddle-flow predict --topology T.yaml schedule.json [--slot-bytes N] [-j]
//
// Exit codes: 0 success; 1 the input was understood and rejected (a schedule that does not
// verify, an intent with errors; rejected proposals are not: the search goes on without them);
// 2 bad input or usage (a file that cannot be read or parsed, an unknown builtin, a bad option).
#pragma once

#include <ostream>

namespace heddle::flow::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRejected = 1;
inline constexpr int kExitBadInput = 2;

int Main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace heddle::flow::cli
