// File: dataplane/relay/wan/decision_log_fuzz.cc
//
// libFuzzer target for the decision log reader (DecisionLog::Open, decision_log.h): a
// coordinator's state_dir is outside input to it (a damaged disk, a file restored by hand, another
// build's log). Each input is written as `decisions.log` in a scratch directory and opened twice:
// as given, and with its header "resealed" (magic, version, this job's spec digest and region, a
// valid CRC) so that mutations reach the records. Beyond "no crash, no hang, no out-of-bounds
// read" (ASan), it aborts when:
//   * a refused log was changed on disk (Open must check everything before it cuts a tail);
//   * an accepted log's file is not a prefix of the input (Open only ever cuts a torn tail);
//   * the replayed records are not increasing, exceed the retained window, or differ from what
//     a second Open of the same file replays;
//   * an accepted log does not take one more record that a reopen then replays.
// Built as relay_decision_log_fuzz (clang, HEDDLE_FUZZ=ON) and, with tests/fuzz/replay_main.cc,
// as the relay_decision_log_fuzz_replay regression runner that ctest uses on
// tests/fuzz/corpus/relay_decision_log.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "common/crc32c.h"
#include "dataplane/relay/wan/decision_log.h"

namespace {

using namespace heddle::relay;

constexpr DecisionLogHeader kJob{.instance = 0x1234abcd5678ef01, .spec_digest = 77, .region_id = 3};
constexpr size_t kHeaderBytes = 36;
constexpr uint32_t kKeep = 4;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "relay_decision_log_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define HEDDLE_FUZZ_CHECK(cond) \
  do {                          \
    if (!(cond)) Fail(#cond);   \
  } while (0)

const std::filesystem::path& Dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() /
                              ("heddle_decision_log_fuzz_" + std::to_string(getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string Path() { return (Dir() / "decisions.log").string(); }

void WriteFile(const std::string& b) {
  std::ofstream(Path(), std::ios::binary | std::ios::trunc) << b;
}

std::string ReadFile() {
  std::ifstream in(Path(), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Put(std::string& b, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<char>(v >> (8 * i));
}

std::string Reseal(std::string b) {
  if (b.size() < kHeaderBytes) return b;
  Put(b, 0, 0x474c4448, 4);  // "HDLG"
  Put(b, 4, kDecisionLogVersion, 4);
  Put(b, 16, kJob.spec_digest, 8);
  Put(b, 24, kJob.region_id, 4);
  const uint32_t crc = heddle::Crc32c(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), kHeaderBytes - 4));
  Put(b, kHeaderBytes - 4, crc, 4);
  return b;
}

void Check(const std::string& input) {
  WriteFile(input);
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(Dir().string(), kJob, kKeep);
  const std::string after = ReadFile();
  if (!log.ok()) {
    HEDDLE_FUZZ_CHECK(after == input);
    return;
  }
  if (input.empty()) {
    HEDDLE_FUZZ_CHECK(after.size() == kHeaderBytes);  // a new log: the header only
  } else {
    HEDDLE_FUZZ_CHECK(after.size() <= input.size());
    HEDDLE_FUZZ_CHECK(input.compare(0, after.size(), after) == 0);
  }
  HEDDLE_FUZZ_CHECK((*log)->file_bytes() == after.size());
  const std::deque<LoggedDecision> first = (*log)->replayed();
  HEDDLE_FUZZ_CHECK(first.size() <= kKeep);
  for (size_t i = 1; i < first.size(); ++i) {
    HEDDLE_FUZZ_CHECK(first[i - 1].round_id < first[i].round_id);
  }
  const uint64_t last = (*log)->last_round();
  log->reset();
  // Opening what Open left changes nothing and replays the same.
  absl::StatusOr<std::unique_ptr<DecisionLog>> again =
      DecisionLog::Open(Dir().string(), kJob, kKeep);
  HEDDLE_FUZZ_CHECK(again.ok());
  HEDDLE_FUZZ_CHECK(ReadFile() == after);
  HEDDLE_FUZZ_CHECK((*again)->replayed().size() == first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    HEDDLE_FUZZ_CHECK((*again)->replayed()[i].round_id == first[i].round_id);
    HEDDLE_FUZZ_CHECK((*again)->replayed()[i].payload == first[i].payload);
  }
  // It goes on from there.
  if (last < UINT64_MAX) {
    HEDDLE_FUZZ_CHECK((*again)->Append(last + 1, "next").ok());
    again->reset();
    absl::StatusOr<std::unique_ptr<DecisionLog>> third =
        DecisionLog::Open(Dir().string(), kJob, kKeep);
    HEDDLE_FUZZ_CHECK(third.ok());
    HEDDLE_FUZZ_CHECK((*third)->last_round() == last + 1);
    HEDDLE_FUZZ_CHECK((*third)->replayed().back().payload == "next");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  Check(input);
  const std::string resealed = Reseal(input);
  if (resealed != input) Check(resealed);
  return 0;
}
