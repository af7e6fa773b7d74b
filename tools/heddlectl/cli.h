// File: tools/heddlectl/cli.h
//
// heddlectl's front end: parses `heddlectl [-s SOCKET] [-j] [--timeout MS] VERB OBJECT [flags]`
// with a parser built from the command registry (command.h), connects to heddled and runs the
// command. Exit codes: 0 success, 1 the daemon or the RPC failed (message on `err`), 2 usage error.
//
// The socket is, in order: -s/--socket, $HEDDLE_SOCKET, /run/heddle/heddled.sock.
#pragma once

#include <ostream>

namespace heddle::api::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int Main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace heddle::api::cli
