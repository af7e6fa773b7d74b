#include "dataplane/relay/wan/decision_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <span>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace heddle::relay {
namespace {

constexpr uint32_t kHeaderMagic = 0x474c4448;  // "HDLG" little-endian
constexpr uint32_t kRecordMagic = 0x43524448;  // "HDRC"
// magic, version, instance, spec digest, region, reserved; then the CRC.
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 4 + 4 + 4;
// magic, version (16), reserved (16), round, payload length; payload; CRC.
constexpr size_t kRecordHead = 4 + 2 + 2 + 8 + 4;
constexpr size_t kRecordOverhead = kRecordHead + 4;
// A decision is a few hundred bytes, one with a schedule switch carries a compiled schedule.
constexpr uint32_t kMaxPayload = 64u << 20;

void Put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void Put64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t Crc(std::string_view s) {
  return Crc32c(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

std::string EncodeHeader(const DecisionLogHeader& h) {
  std::string s;
  Put32(s, kHeaderMagic);
  Put32(s, kDecisionLogVersion);
  Put64(s, h.instance);
  Put64(s, h.spec_digest);
  Put32(s, h.region_id);
  Put32(s, 0);
  Put32(s, Crc(s));
  return s;
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrFormat("wan.state_dir: %s %s: %s", what, path, std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view s, const std::string& path) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    s.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

DecisionLogSyncHooks g_hooks;

int DataSync(int fd) {
  return g_hooks.fdatasync != nullptr ? g_hooks.fdatasync(fd) : ::fdatasync(fd);
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = g_hooks.fsync_dir != nullptr ? g_hooks.fsync_dir(fd) : ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return absl::OkStatus();
}

// Writes header + records to `tmp`, fsyncs it, renames it over `path` and fsyncs the directory.
// *renamed: whether the rename happened (then `path` names the new file even when the directory
// fsync failed, and a file descriptor of the old one appends to an orphaned inode).
absl::Status WriteWhole(const std::string& dir, const std::string& path, std::string_view bytes,
                        bool* renamed) {
  *renamed = false;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status st = WriteAll(fd, bytes, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Errno("cannot fsync", tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Errno("cannot rename", tmp);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  *renamed = true;
  return SyncDir(dir);
}

// The directory that holds `dir` ("." for a relative name without a slash).
std::string Parent(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : d.substr(0, slash);
}

// One record at `off` of `b`: its size, or 0 when it is not a valid record (short, bad magic,
// length, CRC). *version is set once the magic and head are there.
size_t ValidRecordAt(std::span<const uint8_t> b, size_t off, uint16_t* version, uint64_t* round) {
  if (b.size() - off < kRecordOverhead) return 0;
  const uint8_t* p = b.data() + off;
  if (Get32(p) != kRecordMagic) return 0;
  const uint32_t len = Get32(p + 16);
  if (len > kMaxPayload || b.size() - off - kRecordOverhead < len) return 0;
  const uint32_t crc = Crc32c(b.subspan(off, kRecordHead + len));
  if (crc != Get32(p + kRecordHead + len)) return 0;
  *version = static_cast<uint16_t>(p[4] | (p[5] << 8));
  *round = Get64(p + 8);
  return kRecordOverhead + len;
}

// Whether a valid record starts anywhere at or after `from` (the torn-tail check). Only offsets
// holding the record magic and a length that fits the file are checksummed, and at most
// kMaxCandidates of them, checksumming at most 4 × the file's size (+ 1 MiB) in all: a hostile
// file of repeated magics with long lengths would otherwise cost a checksum of the rest of the
// file per offset. Past a cap the scan gives up; the caller refuses the log rather than cut
// what it could not check.
enum class Later { kNone, kFound, kTooMany };
constexpr int kMaxCandidates = 4096;
Later FindValidRecord(std::span<const uint8_t> b, size_t from, size_t* at, uint64_t* round) {
  int candidates = 0;
  uint64_t budget = 4 * uint64_t{b.size()} + (1u << 20);
  for (size_t later = from; later + kRecordOverhead <= b.size(); ++later) {
    const uint8_t* p = b.data() + later;
    if (Get32(p) != kRecordMagic) continue;
    const uint32_t len = Get32(p + 16);
    if (len > kMaxPayload || b.size() - later - kRecordOverhead < len) continue;
    if (++candidates > kMaxCandidates || budget < kRecordHead + len) return Later::kTooMany;
    budget -= kRecordHead + len;
    uint16_t v = 0;
    if (ValidRecordAt(b, later, &v, round) != 0) {
      *at = later;
      return Later::kFound;
    }
  }
  return Later::kNone;
}

}  // namespace

std::string EncodeDecisionRecord(uint64_t round_id, std::string_view payload, uint32_t version) {
  std::string s;
  Put32(s, kRecordMagic);
  s.push_back(static_cast<char>(version & 0xff));
  s.push_back(static_cast<char>((version >> 8) & 0xff));
  s.push_back(0);
  s.push_back(0);
  Put64(s, round_id);
  Put32(s, static_cast<uint32_t>(payload.size()));
  s.append(payload);
  Put32(s, Crc(s));
  return s;
}

void SetDecisionLogSyncHooksForTest(DecisionLogSyncHooks hooks) { g_hooks = hooks; }

absl::StatusOr<std::unique_ptr<DecisionLog>> DecisionLog::Open(const std::string& dir,
                                                               const DecisionLogHeader& fresh,
                                                               uint32_t keep) {
  if (dir.empty()) return absl::InvalidArgumentError("wan.state_dir: empty");
  std::unique_ptr<DecisionLog> log(new DecisionLog());
  log->dir_ = dir;
  log->path_ = dir + "/decisions.log";
  log->keep_ = std::max<uint32_t>(keep, 1);
  if (::mkdir(dir.c_str(), 0700) == 0) {
    // The new directory's entry must be durable too, or a crash can lose the whole log.
    HEDDLE_RETURN_IF_ERROR(SyncDir(Parent(dir)));
  } else if (errno != EEXIST) {
    return Errno("cannot create directory", dir);
  }
  // One process per state_dir: a second coordinator appending to the same log (or compacting
  // it under the first) would interleave two histories. The lock goes with the process.
  const std::string lock = dir + "/decisions.lock";
  log->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (log->lock_fd_ < 0) return Errno("cannot open", lock);
  if (::flock(log->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "wan.state_dir: %s is in use by another process (its lock %s is held): is another "
          "coordinator running with this state_dir? Give each coordinator its own state_dir",
          dir, lock));
    }
    return Errno("cannot lock", lock);
  }
  const std::string& path = log->path_;
  const auto fix = absl::StrFormat(
      "; if this coordinator's decisions are lost, move %s away and restart every gateway of the "
      "job from a checkpoint",
      path);
  int& fd = log->fd_;
  fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return Errno("cannot open", path);
  std::vector<uint8_t> bytes;
  if (fd >= 0) {
    uint8_t buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("cannot read", path);
      if (n == 0) break;
      bytes.insert(bytes.end(), buf, buf + n);
    }
  }
  if (bytes.empty()) {
    // New (or created but never written: a crash before the header was durable).
    if (fd >= 0) ::close(fd);
    fd = -1;
    log->header_ = fresh;
    bool renamed = false;
    HEDDLE_RETURN_IF_ERROR(WriteWhole(dir, path, EncodeHeader(fresh), &renamed));
    fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open for appending", path);
    log->file_bytes_ = kHeaderBytes;
    return log;
  }
  // The header: magic and version before the CRC, so that a newer build's header (whose
  // layout this build does not know) is named as such rather than as damage.
  if (bytes.size() < 8 || Get32(bytes.data()) != kHeaderMagic) {
    return absl::DataLossError(absl::StrFormat(
        "wan.state_dir: %s: not a decision log, or its header is damaged%s", path, fix));
  }
  if (const uint32_t version = Get32(bytes.data() + 4); version != kDecisionLogVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "wan.state_dir: %s has format version %u; this build reads version %u: it was written "
        "by a newer build of heddle-relay (run that build, or move the log away to start a new "
        "job)",
        path, version, kDecisionLogVersion));
  }
  if (bytes.size() < kHeaderBytes ||
      Crc32c(std::span<const uint8_t>(bytes).first(kHeaderBytes - 4)) !=
          Get32(bytes.data() + kHeaderBytes - 4)) {
    return absl::DataLossError(absl::StrFormat(
        "wan.state_dir: %s: not a decision log, or its header is damaged%s", path, fix));
  }
  log->header_.instance = Get64(bytes.data() + 8);
  log->header_.spec_digest = Get64(bytes.data() + 16);
  log->header_.region_id = Get32(bytes.data() + 24);
  // Another job's or region's log is refused before anything in it is changed.
  if (log->header_.spec_digest != fresh.spec_digest || log->header_.region_id != fresh.region_id) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "wan.state_dir: %s holds the decisions of region %u's coordinator for model spec "
        "%016x; this is region %u with spec %016x: give each job and coordinator its own "
        "state_dir (or move the old log away to start a new job)",
        path, log->header_.region_id, log->header_.spec_digest, fresh.region_id,
        fresh.spec_digest));
  }
  // The records: found first, the file changed (a torn tail cut) only once all is checked.
  std::span<const uint8_t> b(bytes);
  const size_t end = bytes.size();
  size_t off = kHeaderBytes;
  std::vector<std::pair<size_t, size_t>> found;  // offset, size
  uint64_t last = 0;
  bool cut = false;
  while (off < end) {
    uint16_t version = 0;
    uint64_t round = 0;
    const size_t n = ValidRecordAt(b, off, &version, &round);
    if (n != 0 && version != kDecisionLogVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "wan.state_dir: %s: the record at byte %u (round %u) has format version %u; this "
          "build reads version %u: it was written by a newer build of heddle-relay",
          path, off, round, version, kDecisionLogVersion));
    }
    if (n == 0 || round <= last) {
      // A torn or corrupt record. Only the last one can be torn by a crash: a valid record
      // further on means the log was damaged, and cutting it would lose decisions.
      size_t later = 0;
      uint64_t r = 0;
      const Later found_later = FindValidRecord(b, off + 1, &later, &r);
      if (found_later == Later::kTooMany) {
        return absl::DataLossError(absl::StrFormat(
            "wan.state_dir: %s: the record at byte %u is %s and more record-like fragments "
            "follow it than the start-up check examines (%d, or 4 x the file's size "
            "checksummed): the log is damaged, not torn by a crash%s",
            path, off, n == 0 ? "corrupt" : "out of order", kMaxCandidates, fix));
      }
      if (found_later == Later::kFound) {
        return absl::DataLossError(absl::StrFormat(
            "wan.state_dir: %s: the record at byte %u is %s but a valid record (round %u) "
            "follows at byte %u: the log is damaged, not torn by a crash, and cutting it "
            "would lose decisions other gateways may have published%s",
            path, off, n == 0 ? "corrupt" : "out of order", r, later, fix));
      }
      HEDDLE_LOG(kWarning,
                 "wan: %s: cut off a torn or corrupt last record at byte %zu (%zu bytes%s): it "
                 "was never acknowledged, so no gateway saw the decision in it; the log ends "
                 "at round %" PRIu64,
                 path.c_str(), off, end - off, n == 0 ? "" : ", round not increasing", last);
      if (::ftruncate(fd, static_cast<off_t>(off)) != 0) {
        return Errno("cannot cut the torn tail of", path);
      }
      cut = true;
      break;
    }
    found.emplace_back(off, n);
    last = round;
    off += n;
  }
  // What is replayed is served to other gateways: it must be on disk, not only in the page
  // cache of a process that wrote it and died before its fdatasync (nor cut only in memory).
  if (DataSync(fd) != 0) return Errno(cut ? "cannot fsync the cut tail of" : "cannot fsync", path);
  for (const auto& [at, n] : found) {
    log->records_.push_back(LoggedDecision{
        .round_id = Get64(b.data() + at + 8),
        .payload = std::string(reinterpret_cast<const char*>(b.data() + at + kRecordHead),
                               n - kRecordOverhead)});
    if (log->records_.size() > log->keep_) log->records_.pop_front();
  }
  log->records_in_file_ = found.size();
  log->file_bytes_ = off;
  return log;
}

DecisionLog::~DecisionLog() {
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status DecisionLog::Append(uint64_t round_id, std::string_view payload) {
  if (round_id <= last_round()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decision log: round %u appended after round %u", round_id, last_round()));
  }
  if (payload.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decision log: round %u: a decision of %u bytes (at most %u)", round_id,
                        payload.size(), kMaxPayload));
  }
  if (broken_) HEDDLE_RETURN_IF_ERROR(Rewrite());
  const std::string rec = EncodeDecisionRecord(round_id, payload);
  absl::Status st = WriteAll(fd_, rec, path_);
  if (st.ok() && DataSync(fd_) != 0) st = Errno("cannot fdatasync", path_);
  if (!st.ok()) {
    // Not accepted, whatever the file now shows: after a failed fdatasync Linux marks the pages
    // clean, so a reread may show a record the disk does not hold. The next Append first
    // replaces the file by one holding exactly the retained records.
    broken_ = true;
    return absl::UnavailableError(
        absl::StrFormat("%s; round %u is not logged", st.message(), round_id));
  }
  file_bytes_ += rec.size();
  ++records_in_file_;
  records_.push_back(LoggedDecision{.round_id = round_id, .payload = std::string(payload)});
  if (records_.size() > keep_) records_.pop_front();
  if (records_in_file_ >= 2 * uint64_t{keep_}) return Compact();
  return absl::OkStatus();
}

absl::Status DecisionLog::Rewrite() {
  std::string bytes = EncodeHeader(header_);
  for (const LoggedDecision& d : records_) bytes += EncodeDecisionRecord(d.round_id, d.payload);
  bool renamed = false;
  absl::Status st = WriteWhole(dir_, path_, bytes, &renamed);
  if (!renamed) return st;  // the old file is as it was
  // path_ names the new file now: append there, never to the old inode.
  const int fd = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    broken_ = true;
    return Errno("cannot reopen after rewriting", path_);
  }
  ::close(fd_);
  fd_ = fd;
  file_bytes_ = bytes.size();
  records_in_file_ = records_.size();
  if (!st.ok()) st = SyncDir(dir_);  // once more
  // Until the rename is durable a crash may bring the old file back, which lacks what is
  // appended from now on: rewrite (and fsync the directory) again before the next append.
  broken_ = !st.ok();
  return st;
}

// The record is durable in the old file before this runs; the rename replaces it by a file
// holding the same header and the last keep_ records, so a crash at any point leaves a log
// with every retained record.
absl::Status DecisionLog::Compact() {
  if (absl::Status st = Rewrite(); !st.ok()) {
    // Either the old file is intact and holds everything (keep appending to it, try again
    // later) or the new one is in place but its name may not be durable (broken_: the next
    // Append rewrites first). The record just appended is durable in both.
    HEDDLE_LOG(kWarning, "wan: %s: compaction failed: %s", path_.c_str(),
               std::string(st.message()).c_str());
    return absl::OkStatus();
  }
  ++compactions_;
  return absl::OkStatus();
}

}  // namespace heddle::relay
