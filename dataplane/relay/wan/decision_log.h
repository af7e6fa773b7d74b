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
  //
  // Checked before the file is changed: the header's spec digest and region must be `fresh`'s
  // (another job's or region's log: FailedPrecondition); another process holding the log
  // (a lock on `dir`/decisions.lock, held while the DecisionLog lives): FailedPrecondition.
  // What Open returns in replayed() is durable (the file, its cut tail included, is fsync'd).
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
  // Appends round `round_id` (greater than last_round()) and makes it durable. Errors:
  // InvalidArgument (round not increasing, payload too large): retrying cannot help;
  // Unavailable (a write or sync failed): the record is not accepted, not in replayed(), and
  // the next Append first rewrites the file with exactly the retained records (write, fsync,
  // rename, directory fsync), so a retry may succeed once the disk recovers.
  absl::Status Append(uint64_t round_id, std::string_view payload);

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t records_in_file() const { return records_in_file_; }
  uint64_t compactions() const { return compactions_; }

 private:
  DecisionLog() = default;
  absl::Status Compact();
  // Replaces the file by header + records_ (write, fsync, rename, directory fsync) and appends
  // to the new file from then on; broken_ stays set until the new name is durable.
  absl::Status Rewrite();

  std::string dir_, path_;
  int fd_ = -1;
  int lock_fd_ = -1;
  uint32_t keep_ = 1;
  DecisionLogHeader header_;
  std::deque<LoggedDecision> records_;
  uint64_t file_bytes_ = 0;
  uint64_t records_in_file_ = 0;
  uint64_t compactions_ = 0;
  // The file may not hold exactly header_ + the records appended (a failed write or sync, or
  // a rename whose directory entry is not durable): rewrite before the next append.
  bool broken_ = false;
};

// Test seams: the sync calls the log makes, so that tests can fail them as a disk does. Null:
// the real call (fdatasync of the log, fsync of its directory). Not thread-safe; tests only.
struct DecisionLogSyncHooks {
  int (*fdatasync)(int fd) = nullptr;
  int (*fsync_dir)(int fd) = nullptr;
};
void SetDecisionLogSyncHooksForTest(DecisionLogSyncHooks hooks);

// The bytes of one record (what Append writes): exposed for tests that damage logs.
std::string EncodeDecisionRecord(uint64_t round_id, std::string_view payload,
                                 uint32_t version = kDecisionLogVersion);

}  // namespace heddle::relay
