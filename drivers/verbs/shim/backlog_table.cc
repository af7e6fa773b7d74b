// File: drivers/verbs/shim/backlog_table.cc
#include "drivers/verbs/shim/backlog_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace heddle::verbs::shim {

static_assert(std::is_standard_layout_v<BacklogHeader>);
static_assert(std::is_standard_layout_v<BacklogSlot>);
static_assert(sizeof(BacklogHeader) % 64 == 0 && sizeof(BacklogSlot) % 64 == 0);
static_assert(std::is_trivially_destructible_v<BacklogSlot>);
// The identity/peer fields sit in the slot's first cache line, ahead of the counters.
static_assert(offsetof(BacklogSlot, dgid) + sizeof(BacklogSlot::dgid) <= 64);

namespace {

// Raises `a` to at least `v` (relaxed: the counters are statistics; each is exact on its own).
void StoreMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

std::string Errno(int err) { return std::strerror(err); }

bool IsLiveKey(uint32_t key) { return key != 0 && (key & kRetiredKeyBit) == 0; }

// Seqlock write of a slot's identity/peer fields (see the file comment of backlog_table.h). The
// caller holds the writer's claim mutex, so there is one writer at a time. The release fence
// after the odd store orders it before the field stores: a reader that sees any new field then
// sees `seq` changed.
template <typename Fn>
void SeqlockWrite(BacklogSlot& s, Fn&& write_fields) {
  const uint32_t q = s.seq.load(std::memory_order_relaxed) & ~1u;
  s.seq.store(q + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  write_fields();
  s.seq.store(q + 2, std::memory_order_release);
}

void ClearPeer(BacklogSlot& s) {
  s.peer_flags.store(0, std::memory_order_relaxed);
  s.dest_qpn.store(0, std::memory_order_relaxed);
  s.dgid[0].store(0, std::memory_order_relaxed);
  s.dgid[1].store(0, std::memory_order_relaxed);
}

// A reader gives up on a slot whose seqlock never reads stable (a writer that died between the
// two stores, or a hostile file) after this many attempts, and reports it without a peer.
constexpr int kSeqlockAttempts = 64;

// The plain fields of BacklogHeader, as read from a file.
struct RawHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t capacity;
  uint32_t header_size;
  uint32_t slot_size;
  int32_t pid;
  int64_t created_unix_ns;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Slot accounting. See the file comment of backlog_table.h for what the marks mean.
//
// Mark publication is a seqlock: the writer of mark s stores seq=0, fences, stores wqes/bytes,
// then stores seq=s+1; a reader accepts the mark only if it reads seq=s+1 both before and after
// the data. The hand-off between "mark k written" (post side) and "completion k seen" (poll side)
// is a store-buffer (Dekker) pattern: the post side stores mark.seq then loads
// signaled_completed; the poll side increments signaled_completed then loads mark.seq. Both are
// seq_cst, so at least one side sees the other's write and settles the mark.

void BacklogSlot::OnPosted(uint64_t bytes, bool signaled) {
  const uint64_t w = posted_wqes.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t b = posted_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (!signaled) return;
  const uint64_t s = signaled_posted.fetch_add(1, std::memory_order_relaxed);
  BacklogMark& m = marks[s % kMarks];
  m.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  m.wqes.store(w, std::memory_order_relaxed);
  m.bytes.store(b, std::memory_order_relaxed);
  m.seq.store(s + 1, std::memory_order_seq_cst);
}

void BacklogSlot::SettleAfterPost() { Settle(); }

void BacklogSlot::OnCompletion(bool success, bool send_queue) {
  completions.fetch_add(1, std::memory_order_relaxed);
  if (!success) {
    error_completions.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!send_queue) return;
  signaled_completed.fetch_add(1, std::memory_order_seq_cst);
  Settle();
}

void BacklogSlot::Settle() {
  const uint64_t c = signaled_completed.load(std::memory_order_seq_cst);
  if (c == 0) return;
  const BacklogMark& m = marks[(c - 1) % kMarks];
  const uint64_t s1 = m.seq.load(std::memory_order_seq_cst);
  if (s1 != c) {
    // Not written yet (the posting side will settle) or already overwritten (ring wrapped; a
    // later completion catches up, the marks being cumulative).
    if (s1 > c) mark_misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t w = m.wqes.load(std::memory_order_relaxed);
  const uint64_t b = m.bytes.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (m.seq.load(std::memory_order_relaxed) != c) {
    mark_misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  StoreMax(completed_wqes, w);
  StoreMax(completed_bytes, b);
}

void BacklogSlot::DiscardOutstanding() {
  StoreMax(completed_wqes, posted_wqes.load(std::memory_order_relaxed));
  StoreMax(completed_bytes, posted_bytes.load(std::memory_order_relaxed));
  StoreMax(signaled_completed, signaled_posted.load(std::memory_order_relaxed));
}

size_t BacklogTableSize(uint32_t capacity) {
  return sizeof(BacklogHeader) + static_cast<size_t>(capacity) * sizeof(BacklogSlot);
}

uint32_t BacklogHomeSlot(uint32_t qp_id, uint32_t capacity) {
  // Fibonacci hashing spreads the consecutive QPNs providers hand out.
  const uint64_t h = static_cast<uint64_t>(qp_id) * 0x9E3779B97F4A7C15ULL;
  return static_cast<uint32_t>((h >> 32) % capacity);
}

// ---------------------------------------------------------------------------------------------
// Writer.

std::string BacklogWriter::PathFor(const std::string& dir, pid_t pid) {
  return absl::StrCat(dir, "/", kTablePrefix, pid);
}

absl::StatusOr<std::unique_ptr<BacklogWriter>> BacklogWriter::Create(const std::string& path,
                                                                     uint32_t capacity) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "backlog table %s: capacity %u out of range 1..%u", path, capacity, kMaxCapacity));
  }
  const size_t size = BacklogTableSize(capacity);
  const std::string tmp = absl::StrCat(path, ".tmp");
  // On Linux shm_open(name) is open("/dev/shm/name"); use it when the table goes there.
  constexpr char kShmDir[] = "/dev/shm/";
  const bool in_shm =
      absl::StartsWith(tmp, kShmDir) && tmp.find('/', sizeof(kShmDir) - 1) == std::string::npos;
  const std::string shm_name = in_shm ? tmp.substr(sizeof(kShmDir) - 2) : "";
  auto unlink_tmp = [&] { in_shm ? shm_unlink(shm_name.c_str()) : unlink(tmp.c_str()); };
  unlink_tmp();  // a leftover from a crashed process with the same pid
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = in_shm ? shm_open(shm_name.c_str(), flags, 0644) : open(tmp.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrFormat(
        "backlog table %s: cannot create: %s; check that the directory exists and is writable", tmp,
        Errno(err)));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    unlink_tmp();
    return absl::ResourceExhaustedError(
        absl::StrFormat("backlog table %s: cannot size to %u bytes: %s", tmp, size, Errno(err)));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink_tmp();
    return absl::ResourceExhaustedError(
        absl::StrFormat("backlog table %s: mmap failed: %s", tmp, Errno(mmap_err)));
  }
  // The file is zero-filled by ftruncate: every slot is empty, every counter 0. Only the header
  // needs writing; the slot pages stay untouched (and unallocated in tmpfs) until claimed.
  auto* h = static_cast<BacklogHeader*>(base);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  h->layout_version = kBacklogLayoutVersion;
  h->capacity = capacity;
  h->header_size = sizeof(BacklogHeader);
  h->slot_size = sizeof(BacklogSlot);
  h->pid = getpid();
  h->created_unix_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  h->magic = kBacklogMagic;
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    munmap(base, size);
    unlink_tmp();
    return absl::UnavailableError(
        absl::StrFormat("backlog table %s: cannot rename into place: %s", path, Errno(err)));
  }
  return std::unique_ptr<BacklogWriter>(new BacklogWriter(path, base, size));
}

BacklogWriter::BacklogWriter(std::string path, void* base, size_t size)
    : path_(std::move(path)),
      base_(base),
      size_(size),
      header_(static_cast<BacklogHeader*>(base)),
      slots_(reinterpret_cast<BacklogSlot*>(static_cast<char*>(base) + sizeof(BacklogHeader))) {}

BacklogWriter::~BacklogWriter() {
  Unlink();
  munmap(base_, size_);
}

void BacklogWriter::Unlink() {
  if (!unlinked_.exchange(true, std::memory_order_relaxed)) unlink(path_.c_str());
}

BacklogSlot* BacklogWriter::SlotFor(uint32_t qp_id) {
  if (BacklogSlot* s = FindSlot(qp_id)) return s;
  std::lock_guard<std::mutex> lock(claim_mu_);
  return ClaimLocked(qp_id);
}

BacklogSlot* BacklogWriter::ClaimLocked(uint32_t qp_id) {
  qp_id &= kQpIdMask;
  const uint32_t cap = header_->capacity;
  const uint32_t want = qp_id + 1;  // ids are 30-bit: never wraps to 0 nor sets kRetiredKeyBit
  const uint32_t probes = std::min(cap, kMaxProbes);
  // A few rounds only matter when another process writes the table (a forked child); within
  // this process the claim mutex makes the first round final.
  for (int round = 0; round < 4; ++round) {
    BacklogSlot* candidate = nullptr;
    uint32_t i = BacklogHomeSlot(qp_id, cap);
    for (uint32_t n = 0; n < probes; ++n) {
      BacklogSlot& s = slots_[i];
      const uint32_t k = s.key.load(std::memory_order_acquire);
      if (k == want) return &s;
      if (k == 0) {  // the end of the chain: `qp_id` has no live slot beyond it
        if (candidate == nullptr) candidate = &s;
        break;
      }
      if ((k & kRetiredKeyBit) != 0 && candidate == nullptr) candidate = &s;
      i = (i + 1 == cap) ? 0 : i + 1;
    }
    if (candidate == nullptr) break;
    uint32_t k = candidate->key.load(std::memory_order_relaxed);
    if (k == 0) {
      bool won = false;
      SeqlockWrite(*candidate, [&] {
        // acq_rel: the claim publishes the slot; a loser (another process) learns the winner.
        won = candidate->key.compare_exchange_strong(k, want, std::memory_order_acq_rel,
                                                     std::memory_order_acquire);
      });
      if (won) {
        header_->claims.fetch_add(1, std::memory_order_release);
        return candidate;
      }
      if (k == want) return candidate;
      continue;
    }
    // A retired slot: its counters were settled when its QP went away, so the new QP starts at
    // backlog 0; the generation tells readers the QP changed.
    SeqlockWrite(*candidate, [&] {
      candidate->key.store(want, std::memory_order_relaxed);
      candidate->generation.fetch_add(1, std::memory_order_relaxed);
      ClearPeer(*candidate);
    });
    return candidate;
  }
  header_->overflow_events.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

BacklogSlot* BacklogWriter::FindSlot(uint32_t qp_id) {
  qp_id &= kQpIdMask;
  const uint32_t cap = header_->capacity;
  uint32_t i = BacklogHomeSlot(qp_id, cap);
  const uint32_t probes = std::min(cap, kMaxProbes);
  for (uint32_t n = 0; n < probes; ++n) {
    const uint32_t k = slots_[i].key.load(std::memory_order_acquire);
    if (k == 0) return nullptr;  // slots never become empty again: the chain ends here
    if (k == qp_id + 1) return &slots_[i];
    i = (i + 1 == cap) ? 0 : i + 1;
  }
  return nullptr;
}

bool BacklogWriter::RecordPeer(uint32_t qp_id, const QpPeer& peer) {
  std::lock_guard<std::mutex> lock(claim_mu_);
  BacklogSlot* s = ClaimLocked(qp_id);  // finds the live slot first
  if (s == nullptr) return false;
  SeqlockWrite(*s, [&] {
    uint32_t flags = s->peer_flags.load(std::memory_order_relaxed);
    if (peer.dest_qpn.has_value()) {
      s->dest_qpn.store(*peer.dest_qpn & kQpnMask, std::memory_order_relaxed);
      flags |= kPeerDestQpn;
    }
    if (peer.dgid.has_value()) {
      uint64_t w[2];
      std::memcpy(w, peer.dgid->data(), sizeof(w));
      s->dgid[0].store(w[0], std::memory_order_relaxed);
      s->dgid[1].store(w[1], std::memory_order_relaxed);
      flags |= kPeerDgid;
    } else if (peer.clear_dgid) {
      s->dgid[0].store(0, std::memory_order_relaxed);
      s->dgid[1].store(0, std::memory_order_relaxed);
      flags &= ~kPeerDgid;
    }
    s->peer_flags.store(flags, std::memory_order_relaxed);
  });
  return true;
}

void BacklogWriter::SettleAndClearLocked(BacklogSlot& s, bool retire) {
  // Settle first: a reader that sees the new generation (acquire) also sees completed_* raised.
  s.DiscardOutstanding();
  SeqlockWrite(s, [&] {
    s.generation.fetch_add(1, std::memory_order_relaxed);
    ClearPeer(s);
    if (retire) {
      s.key.store(s.key.load(std::memory_order_relaxed) | kRetiredKeyBit,
                  std::memory_order_relaxed);
    }
  });
}

void BacklogWriter::ResetQp(uint32_t qp_id) {
  std::lock_guard<std::mutex> lock(claim_mu_);
  if (BacklogSlot* s = FindSlot(qp_id)) SettleAndClearLocked(*s, /*retire=*/false);
}

void BacklogWriter::RetireQp(uint32_t qp_id) {
  std::lock_guard<std::mutex> lock(claim_mu_);
  if (BacklogSlot* s = FindSlot(qp_id)) SettleAndClearLocked(*s, /*retire=*/true);
}

// ---------------------------------------------------------------------------------------------
// Reader.

absl::StatusOr<BacklogReader> BacklogReader::Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO someone named like a table must not hang heddled.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return absl::NotFoundError(
        absl::StrFormat("backlog table %s: cannot open: %s", path, Errno(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("backlog table %s: not a regular file", path));
  }
  const size_t file_size = static_cast<size_t>(st.st_size);
  if (file_size < sizeof(BacklogHeader)) {
    close(fd);
    return absl::DataLossError(
        absl::StrFormat("backlog table %s: truncated: %u bytes, smaller than the %u-byte header",
                        path, file_size, sizeof(BacklogHeader)));
  }
  // Read the header with pread(), not through the mapping, so validation never touches a page
  // beyond the end of the file. BacklogHeader holds an atomic, so copy fields out of raw bytes.
  unsigned char raw[sizeof(BacklogHeader)];
  if (pread(fd, raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
    close(fd);
    return absl::DataLossError(absl::StrFormat("backlog table %s: cannot read header", path));
  }
  RawHeader h;
#define HEDDLE_COPY_FIELD(f) std::memcpy(&h.f, raw + offsetof(BacklogHeader, f), sizeof(h.f))
  HEDDLE_COPY_FIELD(magic);
  HEDDLE_COPY_FIELD(layout_version);
  HEDDLE_COPY_FIELD(capacity);
  HEDDLE_COPY_FIELD(header_size);
  HEDDLE_COPY_FIELD(slot_size);
  HEDDLE_COPY_FIELD(pid);
  HEDDLE_COPY_FIELD(created_unix_ns);
#undef HEDDLE_COPY_FIELD
  auto bad = [&](std::string why) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("backlog table ", path, ": ", why));
  };
  if (h.magic != kBacklogMagic) {
    return bad(absl::StrFormat("bad magic 0x%016x (want 0x%016x): not a heddle backlog table",
                               h.magic, kBacklogMagic));
  }
  if (h.layout_version != kBacklogLayoutVersion) {
    return bad(absl::StrFormat(
        "layout version %u, this heddled reads version %u; run a shim and heddled of the same "
        "release",
        h.layout_version, kBacklogLayoutVersion));
  }
  if (h.header_size != sizeof(BacklogHeader) || h.slot_size != sizeof(BacklogSlot)) {
    return bad(absl::StrFormat("header/slot size %u/%u, want %u/%u", h.header_size, h.slot_size,
                               sizeof(BacklogHeader), sizeof(BacklogSlot)));
  }
  if (h.capacity == 0 || h.capacity > kMaxCapacity) {
    return bad(absl::StrFormat("capacity %u out of range 1..%u", h.capacity, kMaxCapacity));
  }
  const size_t want = BacklogTableSize(h.capacity);
  if (file_size != want) {
    close(fd);
    return absl::DataLossError(
        absl::StrFormat("backlog table %s: %s: %u bytes, want %u for %u slots", path,
                        file_size < want ? "truncated" : "oversized", file_size, want, h.capacity));
  }
  void* base = mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrFormat("backlog table %s: mmap failed: %s", path, Errno(err)));
  }
  BacklogReader r;
  r.path_ = path;
  r.base_ = base;
  r.size_ = want;
  r.fd_ = fd;
  r.pid_ = h.pid;
  r.created_unix_ns_ = h.created_unix_ns;
  r.capacity_ = h.capacity;
  r.dev_ = st.st_dev;
  r.ino_ = st.st_ino;
  // The file may have been truncated between the first fstat() and mmap(); touching the mapping
  // would then raise SIGBUS. (`r` unmaps and closes on the way out.)
  if (absl::Status s = r.CheckSize(); !s.ok()) return s;
  return r;
}

BacklogReader::BacklogReader(BacklogReader&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)),
      pid_(o.pid_),
      created_unix_ns_(o.created_unix_ns_),
      capacity_(o.capacity_),
      dev_(o.dev_),
      ino_(o.ino_) {}

BacklogReader& BacklogReader::operator=(BacklogReader&& o) noexcept {
  if (this != &o) {
    Reset();
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
    pid_ = o.pid_;
    created_unix_ns_ = o.created_unix_ns_;
    capacity_ = o.capacity_;
    dev_ = o.dev_;
    ino_ = o.ino_;
  }
  return *this;
}

BacklogReader::~BacklogReader() { Reset(); }

void BacklogReader::Reset() {
  if (base_ != nullptr) munmap(const_cast<void*>(base_), size_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

absl::Status BacklogReader::CheckSize() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    const int err = errno;
    return absl::DataLossError(
        absl::StrFormat("backlog table %s: fstat failed: %s", path_, Errno(err)));
  }
  if (static_cast<size_t>(st.st_size) != size_) {
    return absl::DataLossError(
        absl::StrFormat("backlog table %s: changed size while mapped: %u bytes, mapped %u; "
                        "something other than the shim rewrote it",
                        path_, static_cast<size_t>(st.st_size), size_));
  }
  return absl::OkStatus();
}

const BacklogSlot* BacklogReader::slots() const {
  return reinterpret_cast<const BacklogSlot*>(static_cast<const char*>(base_) +
                                              sizeof(BacklogHeader));
}

uint64_t BacklogReader::overflow_events() const {
  return static_cast<const BacklogHeader*>(base_)->overflow_events.load(std::memory_order_relaxed);
}

uint64_t BacklogReader::claims() const {
  return static_cast<const BacklogHeader*>(base_)->claims.load(std::memory_order_acquire);
}

std::optional<QpBacklog> BacklogReader::ReadSlot(uint32_t index) const {
  if (index >= capacity_) return std::nullopt;
  const BacklogSlot& s = slots()[index];
  QpBacklog q;
  q.slot = index;
  uint32_t key = 0;
  bool stable = false;
  for (int attempt = 0; attempt < kSeqlockAttempts && !stable; ++attempt) {
    if (attempt > 0) std::this_thread::yield();
    const uint32_t s1 = s.seq.load(std::memory_order_acquire);
    if ((s1 & 1) != 0) continue;  // a writer is between its two stores
    key = s.key.load(std::memory_order_relaxed);
    q.generation = s.generation.load(std::memory_order_relaxed);
    const uint32_t flags = s.peer_flags.load(std::memory_order_relaxed);
    q.dest_qpn = s.dest_qpn.load(std::memory_order_relaxed) & kQpnMask;
    const uint64_t g[2] = {s.dgid[0].load(std::memory_order_relaxed),
                           s.dgid[1].load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != s1) continue;
    stable = true;
    q.has_peer = (flags & (kPeerDestQpn | kPeerDgid)) == (kPeerDestQpn | kPeerDgid);
    std::memcpy(q.dgid.data(), g, sizeof(g));
  }
  if (!stable) {
    // Never consistent (the writer was preempted between its stores, died there, or the file is
    // hostile): report the counters under the current key, without a peer. Each word on its own
    // is whole; only their combination is not vouched for.
    key = s.key.load(std::memory_order_acquire);
    q.generation = s.generation.load(std::memory_order_relaxed);
  }
  if (!IsLiveKey(key)) return std::nullopt;
  if (!q.has_peer) {
    q.dest_qpn = 0;
    q.dgid = {};
  }
  q.qpn = (key - 1) & kQpnMask;
  q.context_index = ((key - 1) & kQpIdMask) >> kQpIdContextShift;
  // After the seqlock's acquire: at least as new as the identity read above (a settle done
  // before the generation changed is visible).
  q.posted_wqes = s.posted_wqes.load(std::memory_order_relaxed);
  q.posted_bytes = s.posted_bytes.load(std::memory_order_relaxed);
  q.completed_wqes = s.completed_wqes.load(std::memory_order_relaxed);
  q.completed_bytes = s.completed_bytes.load(std::memory_order_relaxed);
  q.completions = s.completions.load(std::memory_order_relaxed);
  q.error_completions = s.error_completions.load(std::memory_order_relaxed);
  return q;
}

void BacklogReader::ClaimedSlots(std::vector<uint32_t>* out) const {
  out->clear();
  const BacklogSlot* const s = slots();
  const off_t first_slot = static_cast<off_t>(sizeof(BacklogHeader));
  const off_t end = static_cast<off_t>(size_);
  const off_t slot_size = static_cast<off_t>(sizeof(BacklogSlot));
  // Slot i is visited when its key (its first bytes) lies in a data range [data, hole).
  auto visit = [&](off_t data, off_t hole) {
    const off_t lo = std::max<off_t>(data - first_slot, 0);
    const off_t hi = std::max<off_t>(hole - first_slot, 0);
    const uint64_t from = static_cast<uint64_t>((lo + slot_size - 1) / slot_size);
    const uint64_t to = std::min<uint64_t>(capacity_, (hi + slot_size - 1) / slot_size);
    for (uint64_t i = from; i < to; ++i) {
      if (s[i].key.load(std::memory_order_acquire) != 0) out->push_back(static_cast<uint32_t>(i));
    }
  };
  off_t pos = first_slot;
  while (pos < end) {
    const off_t data = lseek(fd_, pos, SEEK_DATA);
    if (data < 0) {
      if (errno != ENXIO) visit(pos, end);  // no SEEK_DATA here: scan the rest
      break;                                // ENXIO: no data beyond pos
    }
    off_t hole = lseek(fd_, data, SEEK_HOLE);
    if (hole < 0 || hole > end) hole = end;
    if (hole <= data) break;  // the file changed under us; the next claims() change rescans
    visit(data, hole);
    pos = hole;
  }
}

void BacklogReader::ForEachQp(absl::FunctionRef<void(const QpBacklog&)> fn) const {
  std::vector<uint32_t> claimed;
  ClaimedSlots(&claimed);
  for (uint32_t i : claimed) {
    if (std::optional<QpBacklog> q = ReadSlot(i)) fn(*q);
  }
}

std::optional<QpBacklog> BacklogReader::Lookup(uint32_t qp_id) const {
  qp_id &= kQpIdMask;
  const BacklogSlot* const s = slots();
  uint32_t i = BacklogHomeSlot(qp_id, capacity_);
  const uint32_t probes = std::min(capacity_, kMaxProbes);
  for (uint32_t n = 0; n < probes; ++n) {
    const uint32_t k = s[i].key.load(std::memory_order_acquire);
    if (k == 0) return std::nullopt;  // slots never become empty again: the chain ends here
    if (k == qp_id + 1) {
      std::optional<QpBacklog> q = ReadSlot(i);
      if (q.has_value() && MakeQpId(q->context_index, q->qpn) == qp_id) return q;
    }
    i = (i + 1 == capacity_) ? 0 : i + 1;
  }
  return std::nullopt;
}

absl::StatusOr<BacklogScan> BacklogReader::ScanDirectory(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    return absl::NotFoundError(
        absl::StrFormat("backlog directory %s: cannot list: %s", dir, Errno(err)));
  }
  std::vector<std::pair<std::string, pid_t>> found;
  while (dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, kTablePrefix)) continue;
    uint32_t pid = 0;
    // Exactly "heddle-verbs-<digits>": skips ".tmp" files still being initialized.
    if (name.empty() ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(name, &pid) || pid == 0) {
      continue;
    }
    found.emplace_back(absl::StrCat(dir, "/", e->d_name), static_cast<pid_t>(pid));
  }
  closedir(d);
  std::sort(found.begin(), found.end());

  BacklogScan scan;
  for (const auto& [path, pid] : found) {
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      scan.skipped.push_back(absl::StrFormat("%s: process %d is gone", path, pid));
      continue;
    }
    absl::StatusOr<BacklogReader> r = Open(path);
    if (!r.ok()) {
      scan.skipped.push_back(std::string(r.status().message()));
      continue;
    }
    if (r->pid() != pid) {
      scan.skipped.push_back(
          absl::StrFormat("%s: header names process %d, not %d", path, r->pid(), pid));
      continue;
    }
    scan.tables.push_back(*std::move(r));
  }
  return scan;
}

}  // namespace heddle::verbs::shim
