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

namespace {

// Raises `a` to at least `v` (relaxed: the counters are statistics; each is exact on its own).
void StoreMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

std::string Errno(int err) { return std::strerror(err); }

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

size_t BacklogTableSize(uint32_t capacity) {
  return sizeof(BacklogHeader) + static_cast<size_t>(capacity) * sizeof(BacklogSlot);
}

uint32_t BacklogHomeSlot(uint32_t qpn, uint32_t capacity) {
  // Fibonacci hashing spreads the consecutive QPNs providers hand out.
  const uint64_t h = static_cast<uint64_t>(qpn) * 0x9E3779B97F4A7C15ULL;
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

BacklogSlot* BacklogWriter::SlotFor(uint32_t qpn) {
  const uint32_t cap = header_->capacity;
  const uint32_t want = qpn + 1;  // QPNs are 24-bit, so this never wraps to 0
  uint32_t i = BacklogHomeSlot(qpn, cap);
  const uint32_t probes = std::min(cap, kMaxProbes);
  for (uint32_t n = 0; n < probes; ++n) {
    BacklogSlot& s = slots_[i];
    uint32_t k = s.key.load(std::memory_order_acquire);
    if (k == want) return &s;
    if (k == 0) {
      // acq_rel: the claim is a publication of the slot to readers; a loser learns the winner.
      if (s.key.compare_exchange_strong(k, want, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        return &s;
      }
      if (k == want) return &s;
    }
    i = (i + 1 == cap) ? 0 : i + 1;
  }
  header_->overflow_events.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

BacklogSlot* BacklogWriter::FindSlot(uint32_t qpn) {
  const uint32_t cap = header_->capacity;
  uint32_t i = BacklogHomeSlot(qpn, cap);
  const uint32_t probes = std::min(cap, kMaxProbes);
  for (uint32_t n = 0; n < probes; ++n) {
    const uint32_t k = slots_[i].key.load(std::memory_order_acquire);
    if (k == 0) return nullptr;  // slots are claimed in probe order and never released
    if (k == qpn + 1) return &slots_[i];
    i = (i + 1 == cap) ? 0 : i + 1;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Reader.

absl::StatusOr<BacklogReader> BacklogReader::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("backlog table %s: mmap failed: %s", path, Errno(err)));
  }
  BacklogReader r;
  r.path_ = path;
  r.base_ = base;
  r.size_ = want;
  r.pid_ = h.pid;
  r.created_unix_ns_ = h.created_unix_ns;
  r.capacity_ = h.capacity;
  return r;
}

BacklogReader::BacklogReader(BacklogReader&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      pid_(o.pid_),
      created_unix_ns_(o.created_unix_ns_),
      capacity_(o.capacity_) {}

BacklogReader& BacklogReader::operator=(BacklogReader&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) munmap(const_cast<void*>(base_), size_);
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    pid_ = o.pid_;
    created_unix_ns_ = o.created_unix_ns_;
    capacity_ = o.capacity_;
  }
  return *this;
}

BacklogReader::~BacklogReader() {
  if (base_ != nullptr) munmap(const_cast<void*>(base_), size_);
}

uint64_t BacklogReader::overflow_events() const {
  return static_cast<const BacklogHeader*>(base_)->overflow_events.load(std::memory_order_relaxed);
}

QpBacklog BacklogReader::Read(const BacklogSlot& s) const {
  QpBacklog q;
  q.qpn = s.key.load(std::memory_order_acquire) - 1;
  q.posted_wqes = s.posted_wqes.load(std::memory_order_relaxed);
  q.posted_bytes = s.posted_bytes.load(std::memory_order_relaxed);
  q.completed_wqes = s.completed_wqes.load(std::memory_order_relaxed);
  q.completed_bytes = s.completed_bytes.load(std::memory_order_relaxed);
  q.completions = s.completions.load(std::memory_order_relaxed);
  q.error_completions = s.error_completions.load(std::memory_order_relaxed);
  return q;
}

void BacklogReader::ForEachQp(absl::FunctionRef<void(const QpBacklog&)> fn) const {
  const auto* slots =
      reinterpret_cast<const BacklogSlot*>(static_cast<const char*>(base_) + sizeof(BacklogHeader));
  for (uint32_t i = 0; i < capacity_; ++i) {
    if (slots[i].key.load(std::memory_order_acquire) == 0) continue;
    fn(Read(slots[i]));
  }
}

std::optional<QpBacklog> BacklogReader::Lookup(uint32_t qpn) const {
  const auto* slots =
      reinterpret_cast<const BacklogSlot*>(static_cast<const char*>(base_) + sizeof(BacklogHeader));
  uint32_t i = BacklogHomeSlot(qpn, capacity_);
  const uint32_t probes = std::min(capacity_, kMaxProbes);
  for (uint32_t n = 0; n < probes; ++n) {
    const uint32_t k = slots[i].key.load(std::memory_order_acquire);
    if (k == 0) return std::nullopt;  // slots are claimed in probe order and never released
    if (k == qpn + 1) return Read(slots[i]);
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
