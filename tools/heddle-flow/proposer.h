// File: tools/heddle-flow/proposer.h
//
// The external proposal step of `heddle-flow synthesize` (docs/optiflow-schedule.md §4): a shell
// command — a person's script, an LLM wrapper — that reads a prompt on stdin and prints intent
// text on stdout. RunCommand() runs it with a deadline and an output cap; BuildPrompt() writes
// the prompt; ExtractIntentText() takes the program out of a reply (dropping a Markdown code
// fence around it, as models like to add).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace heddle::flow {

struct CommandResult {
  std::string out;  // stdout, at most max_output bytes
  int exit_code = 0;
};

// Runs `/bin/sh -c command` with `input` on its stdin. The command runs in its own process group;
// past `timeout_s` the group is killed and DeadlineExceeded returned. Output beyond `max_output`
// bytes is an error (ResourceExhausted). A non-zero exit is not an error (see exit_code).
absl::StatusOr<CommandResult> RunCommand(const std::string& command, std::string_view input,
                                         double timeout_s, size_t max_output = size_t{1} << 20);

struct PromptParts {
  std::string collective;  // "allreduce over 4 ranks (1 chunk per rank)"
  std::string topology_yaml;
  std::string best_name;  // empty: nothing compiled yet
  double best_predicted_s = 0;
  std::string best_text;
  std::string rejected_text;         // the last rejected proposal; empty: none
  std::string rejected_diagnostics;  // its diagnostics (JSON array)
  int round = 0, rounds = 0;
};

// The prompt (format in docs/optiflow-schedule.md §4): the task, a summary of the DSL, the
// collective, the topology, the best intent so far and the last rejection.
std::string BuildPrompt(const PromptParts& p);

// The intent text in a reply: the body of the first ``` fence if there is one, else the reply.
std::string ExtractIntentText(std::string_view reply);

}  // namespace heddle::flow
