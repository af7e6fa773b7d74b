// File: dataplane/relay/wan/decision_log.h
//
// The coordinator's write-ahead log of round decisions (docs/relay-wan.md §6, `wan.state_dir`).
// The coordinator appends each decision, durably (written and fsync'd), before any other gateway
// can see it; a coordinator that restarts replays the log, so it keeps its process identity
// (followers accept its decisions) and its decided rounds, and continues from the next round
// instead of deciding one of them again, perhaps differently.
//
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<DecisionLog> log,
//                           DecisionLog::Open(dir, {.instance = fresh, ...}, keep_rounds));
//   for (const LoggedDecision& d : log->replayed()) ...        // oldest first
//   HEDDLE_RETURN_IF_ERROR(log->Append(round, bytes));          // durable when OK
//
// The file, `<dir>/decisions.log`: a header (magic "HDLG", format version, the coordinator's
// process instance, the model spec digest, the coordinator's region; CRC-32C), then records
// (magic "HDRC", format version, round id, payload length, payload, CRC-32C of all of it), in
// increasing round id. A record is appended with one write() and fdatasync() before Append
// returns; so only the record being written when the process died can be incomplete — it was
// never acknowledged, hence never sent. At Open:
//   - a torn or corrupt last record (short, bad magic, bad CRC, round not increasing) is cut off
//     (ftruncate + fsync) with a warning naming the offset and the bytes dropped;
//   - a bad record followed by a valid one is not a torn tail but a damaged log: refused
//     (DataLoss), since cutting it would drop decisions other gateways may have published;
//   - a header or record of another format version is refused (FailedPrecondition): a newer
//     build wrote it.
// Bounded: once the file holds 2 × keep records it is rewritten with the last `keep` (to a
// temporary file, fsync'd, renamed over the log, directory fsync'd: a crash leaves the old
// log or the new one, both holding every retained record).
//
// Not thread-safe: one owner (the coordinator's decider thread, and Open at start-up).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::relay {

inline constexpr uint32_t kDecisionLogVersion = 1;

struct DecisionLogHeader {
  uint64_t instance = 0;     // the coordinator's process identity, kept across restarts
  uint64_t spec_digest = 0;  // the job's model spec: a log of another job is refused
  uint32_t region_id = 0;    // the coordinator's region
};

struct LoggedDecision {
  uint64_t round_id = 0;
  std::string payload;
};

class DecisionLog {
 public:
  // Opens `dir`/decisions.log, creating `dir` and the log (with `fresh` as its header) when
  // absent; otherwise validates it (above) and keeps its last `keep` records for replayed().
  // The caller compares header() with what it expects.
  static absl::StatusOr<std::unique_ptr<DecisionLog>> Open(const std::string& dir,
                                                           const DecisionLogHeader& fresh,
                                                           uint32_t keep);
  ~DecisionLog();
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  const DecisionLogHeader& header() const { return header_; }
  // The last `keep` records, oldest first (the retained window; Append adds to it).
  const std::deque<LoggedDecision>& replayed() const { return records_; }
  // The last round appended or replayed; 0 when none.
  uint64_t last_round() const { return records_.empty() ? 0 : records_.back().round_id; }
  // Appends round `round_id` (greater than last_round()) and makes it durable. On an error the
  // record may be partly written: the log refuses further appends (Open cuts such a tail).
  absl::Status Append(uint64_t round_id, std::string_view payload);

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t records_in_file() const { return records_in_file_; }
  uint64_t compactions() const { return compactions_; }

 private:
  DecisionLog() = default;
  absl::Status Compact();

  std::string dir_, path_;
  int fd_ = -1;
  uint32_t keep_ = 1;
  DecisionLogHeader header_;
  std::deque<LoggedDecision> records_;
  uint64_t file_bytes_ = 0;
  uint64_t records_in_file_ = 0;
  uint64_t compactions_ = 0;
  bool broken_ = false;
};

// The bytes of one record (what Append writes): exposed for tests that damage logs.
std::string EncodeDecisionRecord(uint64_t round_id, std::string_view payload,
                                 uint32_t version = kDecisionLogVersion);

}  // namespace heddle::relay
