// File: drivers/verbs/shim/backlog_table.h
//
// The shared-memory table through which an RDMA application (with libheddle_verbs_shim.so
// preloaded) tells heddled how much it has posted and how much has completed, per QP
// (docs/storm.md §4). One table per process, /dev/shm/heddle-verbs-<pid>: a versioned header and
// `capacity` fixed slots keyed by QPN. The application's threads write; heddled maps the table
// read-only and computes host_backlog = posted_bytes − completed_bytes per QPN.
//
//   // In the application (the shim does this):
//   HEDDLE_ASSIGN_OR_RETURN(auto w, BacklogWriter::Create(BacklogWriter::PathFor(dir, getpid())));
//   if (BacklogSlot* s = w->SlotFor(qp->qp_num)) s->OnPosted(bytes, signaled);
//
//   // In heddled:
//   HEDDLE_ASSIGN_OR_RETURN(BacklogScan scan, BacklogReader::ScanDirectory("/dev/shm"));
//   for (const BacklogReader& t : scan.tables)
//     t.ForEachQp([](const QpBacklog& q) { ... q.backlog_bytes() ... });
//
// Concurrency. No lock is shared across processes. Every shared field is a lock-free, address-free
// std::atomic (static_asserted), so the same bytes work in two processes mapped at different
// addresses. A slot is claimed by a CAS of its key from 0 (empty) to qpn+1; a claimed slot never
// changes owner. Counters are written with relaxed fetch_add and read with relaxed loads: each
// counter is individually exact, but a reader may see posted and completed from slightly
// different instants (so clamp posted − completed at 0; backlog_bytes() does).
//
// Completed bytes. A send completion's wc.byte_len is not defined for sends, and with selective
// signaling one completion stands for every earlier WQE of that send queue. So the writer
// records, for every *signaled* WR, the cumulative (posted_wqes, posted_bytes) right after it,
// in a small ring of marks indexed by the WR's signaled sequence number. The k-th successful send
// completion on the QP then means "everything up to mark k is done", and the completion side
// raises completed_wqes/completed_bytes to that mark (a monotonic max, never an add). Because the
// marks are cumulative, a missed mark (ring wrapped: more than kMarks signaled WRs outstanding;
// or a completion polled before the posting thread recorded its mark) only delays the counters to
// the next completion that finds its mark; both the posting and the completing side try to settle,
// so the last completion is not lost to that race. The marks are exact when one thread at a time
// posts to a given QP (what providers require for ordering anyway) and the QP signals its WRs
// with IBV_SEND_SIGNALED. Known gaps: a QP created with sq_sig_all=1 that never sets
// IBV_SEND_SIGNALED has no marks (its `completions` still count, completed_* stay 0); error
// completions cannot be told apart between send and receive queue (wc.opcode is undefined then),
// so they count in `error_completions` and do not settle marks.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace heddle::verbs::shim {

inline constexpr uint64_t kBacklogMagic = 0x3176627364646568ULL;  // "heddsbv1", little-endian
inline constexpr uint32_t kBacklogLayoutVersion = 1;
inline constexpr uint32_t kDefaultCapacity = 4096;
inline constexpr uint32_t kMaxCapacity = 1u << 20;  // a reader refuses larger tables
// Slots probed from a QPN's home slot before the writer gives up and counts an overflow.
inline constexpr uint32_t kMaxProbes = 64;
inline constexpr char kTablePrefix[] = "heddle-verbs-";

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct alignas(64) BacklogHeader {
  uint64_t magic;           // kBacklogMagic; the file is renamed into place once all is set
  uint32_t layout_version;  // kBacklogLayoutVersion
  uint32_t capacity;        // number of slots
  uint32_t header_size;     // sizeof(BacklogHeader)
  uint32_t slot_size;       // sizeof(BacklogSlot)
  int32_t pid;              // the writing process
  uint32_t reserved0;
  int64_t created_unix_ns;  // CLOCK_REALTIME at creation
  // Accounting events dropped because no slot could be claimed for the QPN (table full).
  std::atomic<uint64_t> overflow_events;
};

// One signaled WR's cumulative position on its send queue (see the file comment). A seqlock:
// `seq` is the signaled sequence number + 1, 0 while being rewritten.
struct BacklogMark {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> wqes;
  std::atomic<uint64_t> bytes;
};

struct alignas(64) BacklogSlot {
  static constexpr uint32_t kMarks = 32;

  std::atomic<uint32_t> key;  // 0: empty; else qpn + 1
  uint32_t reserved0;
  // Application-written counters; heddled reads these.
  std::atomic<uint64_t> posted_wqes;
  std::atomic<uint64_t> posted_bytes;
  std::atomic<uint64_t> completed_wqes;     // cumulative WQEs known complete (covers unsignaled)
  std::atomic<uint64_t> completed_bytes;    // cumulative bytes of those WQEs
  std::atomic<uint64_t> completions;        // every work completion polled for this QPN
  std::atomic<uint64_t> error_completions;  // of which status != IBV_WC_SUCCESS
  // Writer-private bookkeeping for completed_* (lives here so the table is the only state).
  std::atomic<uint64_t> signaled_posted;
  std::atomic<uint64_t> signaled_completed;
  std::atomic<uint64_t> mark_misses;  // completions that found no valid mark (diagnostic)
  BacklogMark marks[kMarks];

  // Writer side. One accepted WR of `bytes` payload; `signaled` when it will produce a completion.
  void OnPosted(uint64_t bytes, bool signaled);
  // After a batch of OnPosted() with at least one signaled WR: settles a completion that raced
  // ahead of its mark.
  void SettleAfterPost();
  // One polled completion for this QP: `success` is status == IBV_WC_SUCCESS, `send_queue` that
  // its opcode is a send-queue one (only meaningful on success).
  void OnCompletion(bool success, bool send_queue);

 private:
  void Settle();
};

// What a reader sees for one QP.
struct QpBacklog {
  uint32_t qpn = 0;
  uint64_t posted_wqes = 0;
  uint64_t posted_bytes = 0;
  uint64_t completed_wqes = 0;
  uint64_t completed_bytes = 0;
  uint64_t completions = 0;
  uint64_t error_completions = 0;
  uint64_t backlog_bytes() const {
    return posted_bytes > completed_bytes ? posted_bytes - completed_bytes : 0;
  }
  uint64_t backlog_wqes() const {
    return posted_wqes > completed_wqes ? posted_wqes - completed_wqes : 0;
  }
};

// Bytes of a table with `capacity` slots.
size_t BacklogTableSize(uint32_t capacity);
// Home slot of a QPN.
uint32_t BacklogHomeSlot(uint32_t qpn, uint32_t capacity);

// The application side. Creates and owns one table. Not copyable; the mapping lives as long as
// the writer (the shim never destroys its writer, so that threads still posting at exit never
// touch an unmapped page; it only unlinks the file).
class BacklogWriter {
 public:
  // `path` must not exist yet, or belong to a dead process with the same pid (it is replaced).
  // The table appears under `path` only once fully initialized (created as `path`.tmp, renamed).
  static absl::StatusOr<std::unique_ptr<BacklogWriter>> Create(
      const std::string& path, uint32_t capacity = kDefaultCapacity);
  // "<dir>/heddle-verbs-<pid>".
  static std::string PathFor(const std::string& dir, pid_t pid);

  ~BacklogWriter();  // unmaps and unlinks
  BacklogWriter(const BacklogWriter&) = delete;
  BacklogWriter& operator=(const BacklogWriter&) = delete;

  // The slot of `qpn`, claiming one if needed. nullptr when no slot is free within kMaxProbes
  // of its home slot (header overflow_events is counted). Lock-free, no allocation.
  BacklogSlot* SlotFor(uint32_t qpn);
  // The slot of `qpn` if one was claimed, else nullptr (nothing counted). For completions: a QP
  // that never posted a send (receive-only) gets no slot.
  BacklogSlot* FindSlot(uint32_t qpn);
  // Removes the file name (the mapping stays usable). Idempotent.
  void Unlink();

  const std::string& path() const { return path_; }
  uint32_t capacity() const { return header_->capacity; }
  uint64_t overflow_events() const {
    return header_->overflow_events.load(std::memory_order_relaxed);
  }

 private:
  BacklogWriter(std::string path, void* base, size_t size);

  std::string path_;
  void* base_;
  size_t size_;
  BacklogHeader* header_;
  BacklogSlot* slots_;
  std::atomic<bool> unlinked_{false};
};

struct BacklogScan;

// The heddled side: one table mapped read-only (PROT_READ). Movable.
class BacklogReader {
 public:
  // Opens every "heddle-verbs-<pid>" table in `dir`, skipping those whose process no longer
  // exists and those that fail validation (listed in `skipped`). Errors only when `dir` cannot be
  // read.
  static absl::StatusOr<BacklogScan> ScanDirectory(const std::string& dir);

  // Validates magic, layout version, header and slot size, capacity and file size; a mismatching,
  // truncated or hostile file is an error naming the path and what is wrong.
  static absl::StatusOr<BacklogReader> Open(const std::string& path);

  BacklogReader(BacklogReader&& other) noexcept;
  BacklogReader& operator=(BacklogReader&& other) noexcept;
  ~BacklogReader();

  // Every claimed slot, in slot order.
  void ForEachQp(absl::FunctionRef<void(const QpBacklog&)> fn) const;
  std::optional<QpBacklog> Lookup(uint32_t qpn) const;

  const std::string& path() const { return path_; }
  pid_t pid() const { return pid_; }
  int64_t created_unix_ns() const { return created_unix_ns_; }
  uint32_t capacity() const { return capacity_; }
  uint64_t overflow_events() const;

 private:
  BacklogReader() = default;
  QpBacklog Read(const BacklogSlot& s) const;

  std::string path_;
  const void* base_ = nullptr;
  size_t size_ = 0;
  pid_t pid_ = 0;
  int64_t created_unix_ns_ = 0;
  uint32_t capacity_ = 0;
};

struct BacklogScan {
  std::vector<BacklogReader> tables;  // live processes' tables, by path
  // Tables not returned and why: "<path>: process 1234 is gone" or the Open() error.
  std::vector<std::string> skipped;
};

}  // namespace heddle::verbs::shim
