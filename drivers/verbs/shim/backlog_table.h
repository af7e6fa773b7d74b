// File: drivers/verbs/shim/backlog_table.h
//
// The shared-memory table through which an RDMA application (with libheddle_verbs_shim.so
// preloaded) tells heddled how much it has posted and how much has completed, per QP, and which
// remote QP each of its QPs is connected to (docs/storm.md §4). One table per process,
// /dev/shm/heddle-verbs-<pid>: a versioned header and `capacity` fixed slots keyed by QP. The
// application's threads write; heddled maps the table read-only and computes
// host_backlog = posted_bytes − completed_bytes per QP, keyed on the wire by its peer
// (dgid, dest_qpn) (drivers/verbs/host_backlog.h does that join).
//
//   // In the application (the shim does this):
//   HEDDLE_ASSIGN_OR_RETURN(auto w, BacklogWriter::Create(BacklogWriter::PathFor(dir, getpid())));
//   w->RecordPeer(qp->qp_num, peer);                  // ibv_modify_qp to RTR succeeded
//   if (BacklogSlot* s = w->SlotFor(qp->qp_num)) s->OnPosted(bytes, signaled);
//   w->RetireQp(qp->qp_num);                          // ibv_destroy_qp succeeded
//
//   // In heddled:
//   HEDDLE_ASSIGN_OR_RETURN(BacklogScan scan, BacklogReader::ScanDirectory("/dev/shm"));
//   for (const BacklogReader& t : scan.tables)
//     t.ForEachQp([](const QpBacklog& q) { ... q.backlog_bytes() ... q.has_peer ... });
//
// Concurrency. No lock is shared across processes. Every shared field is a lock-free, address-free
// std::atomic (static_asserted), so the same bytes work in two processes mapped at different
// addresses. Two kinds of data live in a slot:
//
// - Counters (posted_*, completed_*, completions, ...), written on the application's fast path with
//   relaxed fetch_add / monotonic max and read with relaxed loads: each counter is individually
//   exact, but a reader may see posted and completed from slightly different instants (so clamp
//   posted − completed at 0; backlog_bytes() does). Counters are cumulative per slot and never go
//   down, also across the QPs that successively use the slot (see "QP lifetime" below).
// - Identity and peer (key, generation, peer_flags, dest_qpn, dgid), written only on the slow path
//   (slot claim, ibv_modify_qp, ibv_destroy_qp) by one thread at a time — the writer serializes
//   these under its process-local claim mutex — and published to readers with a seqlock: the
//   writer makes `seq` odd, stores the fields, makes `seq` even again with a release store; a
//   reader acquire-loads `seq`, loads the fields, and accepts them only if `seq` was even and
//   unchanged after an acquire fence (retrying a few times, then reporting the slot without a
//   peer). So a reader never sees the dgid of one connection with the dest_qpn of another, nor a
//   peer under the key of a different QP. Counters read after an accepted seqlock read are at least
//   as new as that identity.
//
// Slot claim. A slot holds key 0 (empty), qp_id + 1 (live), or kRetiredKeyBit | (qp_id + 1) (its
// QP was destroyed), where qp_id is the QPN plus the device context's index (MakeQpId). A slot
// never becomes empty again, so a lookup probing from a QP's home slot stops at the first empty
// slot. The fast path (FindSlot, and SlotFor when the QP already has a slot) is lock-free.
// Claiming — the first time a QP is seen — takes the writer's claim mutex, so two threads never
// claim two slots for one QP; it reuses the first retired slot of the probe window, else the first
// empty one. header.claims counts empty slots claimed (release), so a reader can keep the list of
// non-empty slots and rebuild it only when that count moves.
//
// QP lifetime. A QPN is reused by the provider once its QP is destroyed. When the shim sees a QP
// destroyed (ibv_destroy_qp) or moved back to RESET (ibv_modify_qp), which both discard the QP's
// outstanding work requests, the writer settles the slot — completed_* are raised to posted_*, so
// the backlog is 0 — clears the peer and bumps `generation`; on destroy it also retires the key.
// The next QP with that QPN (or with another QPN reusing the retired slot) therefore starts at
// backlog 0 and never inherits the old QP's unfinished bytes, while every counter stays
// monotonic. `generation` tells a reader that computes rates that the QP behind the slot changed.
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
// so they count in `error_completions` and do not settle marks; a completion that one thread is
// still accounting while another destroys the QP and a new QP reuses its QPN lands on the new QP
// (applications destroy a QP after draining it, so the window is empty in practice).
//
// Reading a file another user controls. The reader validates the header with pread() and the
// size with fstat() before and after mapping, keeps the descriptor and re-checks the size
// (CheckSize) before each use, so a table truncated between two reads is refused instead of
// raising SIGBUS. A truncation in the microseconds between that check and the loads is not
// covered (only a signal handler could); the writer itself never resizes its table.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::verbs::shim {

inline constexpr uint64_t kBacklogMagic = 0x3176627364646568ULL;  // "heddsbv1", little-endian
// 2: peer capture (slot identity under a seqlock, generation, dest_qpn, dgid), retired keys, QP
// ids with the context index, header.claims.
inline constexpr uint32_t kBacklogLayoutVersion = 2;
inline constexpr uint32_t kDefaultCapacity = 4096;
inline constexpr uint32_t kMaxCapacity = 1u << 20;  // a reader refuses larger tables
// Slots probed from a QP's home slot before the writer gives up and counts an overflow.
inline constexpr uint32_t kMaxProbes = 64;
inline constexpr char kTablePrefix[] = "heddle-verbs-";
// Set in a slot's key once its QP was destroyed (the low bits keep qp_id + 1).
inline constexpr uint32_t kRetiredKeyBit = 0x80000000u;
// BacklogSlot::peer_flags.
inline constexpr uint32_t kPeerDestQpn = 1u << 0;  // dest_qpn is set (IBV_QP_DEST_QPN)
inline constexpr uint32_t kPeerDgid = 1u << 1;     // dgid is set (IBV_QP_AV with is_global)
// QPNs are 24-bit on the wire.
inline constexpr uint32_t kQpnMask = 0xffffff;
// A slot is keyed by a QP id: the QPN in bits 0-23 and, in bits 24-29, the index of the QP's
// device context in the shim's registry. QPNs are allocated per device, so a process using two
// RDMA devices can hold two QPs with the same QPN; the context index keeps them apart. With one
// context (index 0) the id is the QPN.
inline constexpr uint32_t kQpIdContextShift = 24;
inline constexpr uint32_t kMaxQpIdContexts = 64;
inline constexpr uint32_t kQpIdMask = (kMaxQpIdContexts << kQpIdContextShift) - 1;
inline constexpr uint32_t MakeQpId(uint32_t context_index, uint32_t qpn) {
  return ((context_index << kQpIdContextShift) | (qpn & kQpnMask)) & kQpIdMask;
}

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
  // Empty slots claimed so far (incremented with release after the key is stored).
  std::atomic<uint64_t> claims;
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

  // Identity and peer: slow-path writes only, published under `seq` (see the file comment).
  std::atomic<uint32_t> key;         // 0: empty; qp_id + 1: live; kRetiredKeyBit | (qp_id + 1)
  std::atomic<uint32_t> seq;         // seqlock over key, generation and the peer; odd: changing
  std::atomic<uint32_t> generation;  // +1 each time the slot's QP is reset, destroyed or replaced
  std::atomic<uint32_t> peer_flags;  // kPeerDestQpn | kPeerDgid
  std::atomic<uint32_t> dest_qpn;    // ibv_qp_attr.dest_qp_num, masked to 24 bits
  uint32_t reserved0;
  std::atomic<uint64_t> dgid[2];  // ibv_qp_attr.ah_attr.grh.dgid.raw: bytes 0-7, 8-15, as memcpy'd
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
  friend class BacklogWriter;
  void Settle();
  // The QP's outstanding WRs were discarded (reset or destroyed): completed_* := posted_*, and the
  // signaled sequence catches up so the next QP's k-th completion finds its k-th mark.
  void DiscardOutstanding();
};

// A QP's peer as ibv_modify_qp sets it; either part may be absent from one call.
struct QpPeer {
  std::optional<uint32_t> dest_qpn;             // IBV_QP_DEST_QPN
  std::optional<std::array<uint8_t, 16>> dgid;  // IBV_QP_AV with ah_attr.is_global
  bool clear_dgid = false;                      // IBV_QP_AV without a GRH: the peer has no GID
};

// What a reader sees for one live QP.
struct QpBacklog {
  uint32_t qpn = 0;
  uint32_t context_index = 0;  // the shim's index of the QP's device context (see MakeQpId)
  uint32_t slot = 0;           // index of the slot in the table
  uint32_t generation = 0;     // changes when the QP behind this QPN/slot was reset or replaced
  // The peer, when both its QPN and GID are known (RoCE: always, once the QP reached RTR). For
  // RoCEv2 over IPv4 the GID is the v4-mapped address ::ffff:a.b.c.d.
  bool has_peer = false;
  uint32_t dest_qpn = 0;
  std::array<uint8_t, 16> dgid{};
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
// Home slot of a QP id.
uint32_t BacklogHomeSlot(uint32_t qp_id, uint32_t capacity);

// The application side. Creates and owns one table. Not copyable; the mapping lives as long as
// the writer (the shim never destroys its writer, so that threads still posting at exit never
// touch an unmapped page; it only unlinks the file).
class BacklogWriter {
 public:
  // `path` must not exist yet, or belong to a dead process with the same pid: it is replaced
  // atomically (the table is created as `path`.tmp and renamed over `path` once initialized), so a
  // reader that still maps the old file keeps reading the old inode.
  static absl::StatusOr<std::unique_ptr<BacklogWriter>> Create(
      const std::string& path, uint32_t capacity = kDefaultCapacity);
  // "<dir>/heddle-verbs-<pid>".
  static std::string PathFor(const std::string& dir, pid_t pid);

  ~BacklogWriter();  // unmaps and unlinks
  BacklogWriter(const BacklogWriter&) = delete;
  BacklogWriter& operator=(const BacklogWriter&) = delete;

  // `qp_id` below is MakeQpId(context index, QPN); bits above kQpIdMask are ignored.
  //
  // The live slot of `qp_id`, claiming one if needed (under the claim mutex, only the first
  // time). nullptr when no slot is free within kMaxProbes of its home slot (header
  // overflow_events is counted). No allocation.
  BacklogSlot* SlotFor(uint32_t qp_id);
  // The live slot of `qp_id` if one was claimed, else nullptr (nothing counted). Lock-free. For
  // completions: a QP that never posted a send (receive-only) gets no slot.
  BacklogSlot* FindSlot(uint32_t qp_id);

  // Slow-path QP events (the shim's ibv_modify_qp / ibv_destroy_qp). Each takes the claim mutex.
  // Sets the parts of the peer present in `peer`, claiming the QP's slot if needed; false when the
  // table is full.
  bool RecordPeer(uint32_t qp_id, const QpPeer& peer);
  // The QP went back to RESET: settles its slot, clears the peer, bumps the generation.
  void ResetQp(uint32_t qp_id);
  // The QP was destroyed: as ResetQp, and the key is retired so the slot can be reused.
  void RetireQp(uint32_t qp_id);

  // Removes the file name (the mapping stays usable). Idempotent.
  void Unlink();

  const std::string& path() const { return path_; }
  uint32_t capacity() const { return header_->capacity; }
  uint64_t overflow_events() const {
    return header_->overflow_events.load(std::memory_order_relaxed);
  }

 private:
  BacklogWriter(std::string path, void* base, size_t size);
  BacklogSlot* ClaimLocked(uint32_t qp_id);
  void SettleAndClearLocked(BacklogSlot& s, bool retire);

  std::string path_;
  void* base_;
  size_t size_;
  BacklogHeader* header_;
  BacklogSlot* slots_;
  std::atomic<bool> unlinked_{false};
  // Serializes slot claims and every identity/peer write (the seqlock's single writer).
  std::mutex claim_mu_;
};

struct BacklogScan;

// The heddled side: one table mapped read-only (PROT_READ), its descriptor kept open to re-check
// the file size. Movable. Reads are const and may run on any thread.
class BacklogReader {
 public:
  // Opens every "heddle-verbs-<pid>" table in `dir`, skipping those whose process no longer
  // exists and those that fail validation (listed in `skipped`). Errors only when `dir` cannot be
  // read.
  static absl::StatusOr<BacklogScan> ScanDirectory(const std::string& dir);

  // Validates magic, layout version, header and slot size, capacity and file size (fstat before
  // and after mapping); a mismatching, truncated, non-regular or hostile file is an error naming
  // the path and what is wrong. Never blocks on a FIFO.
  static absl::StatusOr<BacklogReader> Open(const std::string& path);

  BacklogReader(BacklogReader&& other) noexcept;
  BacklogReader& operator=(BacklogReader&& other) noexcept;
  ~BacklogReader();

  // Every live QP, in slot order. Loads the key of every slot: for repeated reads prefer
  // ClaimedSlots() once and ReadSlot() per index.
  void ForEachQp(absl::FunctionRef<void(const QpBacklog&)> fn) const;
  // The live QP with id `qp_id` (MakeQpId; the QPN for the first device context).
  std::optional<QpBacklog> Lookup(uint32_t qp_id) const;

  // The slot at `index` if it holds a live QP (nullopt: empty, retired or out of range).
  std::optional<QpBacklog> ReadSlot(uint32_t index) const;
  // Header claims counter (acquire): when unchanged since a ClaimedSlots() call, so is the set of
  // non-empty slots.
  uint64_t claims() const;
  // Replaces `out` with the indices of all non-empty slots (live or retired). Skips the file's
  // holes (lseek SEEK_DATA) so that slot pages the writer never touched are not faulted in.
  void ClaimedSlots(std::vector<uint32_t>* out) const;
  // OK while the file still has the size that was mapped; reading after an error would SIGBUS.
  absl::Status CheckSize() const;

  const std::string& path() const { return path_; }
  pid_t pid() const { return pid_; }
  int64_t created_unix_ns() const { return created_unix_ns_; }
  uint32_t capacity() const { return capacity_; }
  dev_t device() const { return dev_; }
  ino_t inode() const { return ino_; }
  uint64_t overflow_events() const;

 private:
  BacklogReader() = default;
  const BacklogSlot* slots() const;
  void Reset();

  std::string path_;
  const void* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  pid_t pid_ = 0;
  int64_t created_unix_ns_ = 0;
  uint32_t capacity_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

struct BacklogScan {
  std::vector<BacklogReader> tables;  // live processes' tables, by path
  // Tables not returned and why: "<path>: process 1234 is gone" or the Open() error.
  std::vector<std::string> skipped;
};

}  // namespace heddle::verbs::shim
