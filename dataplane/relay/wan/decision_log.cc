#include "dataplane/relay/wan/decision_log.h"

#include <fcntl.h>
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

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return absl::OkStatus();
}

// Writes header + records to `tmp`, fsyncs it, renames it over `path` and fsyncs the directory.
absl::Status WriteWhole(const std::string& dir, const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status st = WriteAll(fd, bytes, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Errno("cannot fsync", tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Errno("cannot rename", tmp);
  if (st.ok()) st = SyncDir(dir);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
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

absl::StatusOr<std::unique_ptr<DecisionLog>> DecisionLog::Open(const std::string& dir,
                                                               const DecisionLogHeader& fresh,
                                                               uint32_t keep) {
  if (dir.empty()) return absl::InvalidArgumentError("wan.state_dir: empty");
  std::unique_ptr<DecisionLog> log(new DecisionLog());
  log->dir_ = dir;
  log->path_ = dir + "/decisions.log";
  log->keep_ = std::max<uint32_t>(keep, 1);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno("cannot create directory", dir);
  }
  const std::string& path = log->path_;
  const auto fix = absl::StrFormat(
      "; if this coordinator's decisions are lost, move %s away and restart every gateway of the "
      "job from a checkpoint",
      path);
  std::vector<uint8_t> bytes;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return Errno("cannot open", path);
    if (fd >= 0) {
      uint8_t buf[1 << 16];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          absl::Status st = Errno("cannot read", path);
          ::close(fd);
          return st;
        }
        if (n == 0) break;
        bytes.insert(bytes.end(), buf, buf + n);
      }
      ::close(fd);
    }
  }
  if (bytes.empty()) {
    // New (or created but never written: a crash before the header was durable).
    log->header_ = fresh;
    HEDDLE_RETURN_IF_ERROR(WriteWhole(dir, path, EncodeHeader(fresh)));
  } else {
    if (bytes.size() < kHeaderBytes || Get32(bytes.data()) != kHeaderMagic ||
        Crc32c(std::span<const uint8_t>(bytes).first(kHeaderBytes - 4)) !=
            Get32(bytes.data() + kHeaderBytes - 4)) {
      return absl::DataLossError(absl::StrFormat(
          "wan.state_dir: %s: not a decision log, or its header is damaged%s", path, fix));
    }
    const uint32_t version = Get32(bytes.data() + 4);
    if (version != kDecisionLogVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "wan.state_dir: %s has format version %u; this build reads version %u (was it written "
          "by a newer heddle-relay?)",
          path, version, kDecisionLogVersion));
    }
    log->header_.instance = Get64(bytes.data() + 8);
    log->header_.spec_digest = Get64(bytes.data() + 16);
    log->header_.region_id = Get32(bytes.data() + 24);
  }
  // The records.
  std::span<const uint8_t> b(bytes);
  size_t off = kHeaderBytes;
  const size_t end = bytes.empty() ? kHeaderBytes : bytes.size();
  {
    uint64_t last = 0;
    while (off < end) {
      uint16_t version = 0;
      uint64_t round = 0;
      const size_t n = ValidRecordAt(b, off, &version, &round);
      if (n != 0 && version != kDecisionLogVersion) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "wan.state_dir: %s: the record at byte %u (round %u) has format version %u; this "
            "build reads version %u",
            path, off, round, version, kDecisionLogVersion));
      }
      if (n == 0 || round <= last) {
        // A torn or corrupt record. Only the last one can be torn by a crash: a valid record
        // further on means the log was damaged, and cutting it would lose decisions.
        for (size_t later = off + 1; later + kRecordOverhead <= end; ++later) {
          uint16_t v = 0;
          uint64_t r = 0;
          if (ValidRecordAt(b, later, &v, &r) != 0) {
            return absl::DataLossError(absl::StrFormat(
                "wan.state_dir: %s: the record at byte %u is %s but a valid record (round %u) "
                "follows at byte %u: the log is damaged, not torn by a crash, and cutting it "
                "would lose decisions other gateways may have published%s",
                path, off, n == 0 ? "corrupt" : "out of order", r, later, fix));
          }
        }
        HEDDLE_LOG(kWarning,
                   "wan: %s: cut off a torn or corrupt last record at byte %zu (%zu bytes%s): it "
                   "was never acknowledged, so no gateway saw the decision in it; the log ends "
                   "at round %" PRIu64,
                   path.c_str(), off, end - off, n == 0 ? "" : ", round not increasing", last);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) return Errno("cannot open", path);
        const bool ok = ::ftruncate(fd, static_cast<off_t>(off)) == 0 && ::fsync(fd) == 0;
        ::close(fd);
        if (!ok) return Errno("cannot cut the torn tail of", path);
        break;
      }
      log->records_.push_back(LoggedDecision{
          .round_id = round,
          .payload = std::string(reinterpret_cast<const char*>(b.data() + off + kRecordHead),
                                 n - kRecordOverhead)});
      if (log->records_.size() > log->keep_) log->records_.pop_front();
      ++log->records_in_file_;
      last = round;
      off += n;
    }
  }
  log->file_bytes_ = off;
  log->fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log->fd_ < 0) return Errno("cannot open for appending", path);
  return log;
}

DecisionLog::~DecisionLog() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status DecisionLog::Append(uint64_t round_id, std::string_view payload) {
  if (broken_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "wan.state_dir: %s: an earlier append failed; restart the coordinator (the log's tail "
        "is cut at start-up)",
        path_));
  }
  if (round_id <= last_round()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decision log: round %u appended after round %u", round_id, last_round()));
  }
  if (payload.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decision log: round %u: a decision of %u bytes (at most %u)", round_id,
                        payload.size(), kMaxPayload));
  }
  const std::string rec = EncodeDecisionRecord(round_id, payload);
  absl::Status st = WriteAll(fd_, rec, path_);
  if (st.ok() && ::fdatasync(fd_) != 0) st = Errno("cannot fdatasync", path_);
  if (!st.ok()) {
    broken_ = true;
    return st;
  }
  file_bytes_ += rec.size();
  ++records_in_file_;
  records_.push_back(LoggedDecision{.round_id = round_id, .payload = std::string(payload)});
  if (records_.size() > keep_) records_.pop_front();
  if (records_in_file_ >= 2 * uint64_t{keep_}) return Compact();
  return absl::OkStatus();
}

// The record is durable in the old file before this runs; the rename replaces it by a file
// holding the same header and the last keep_ records, so a crash at any point leaves a log
// with every retained record.
absl::Status DecisionLog::Compact() {
  std::string bytes = EncodeHeader(header_);
  for (const LoggedDecision& d : records_) bytes += EncodeDecisionRecord(d.round_id, d.payload);
  absl::Status st = WriteWhole(dir_, path_, bytes);
  if (!st.ok()) {
    // The old file is intact and holds everything: keep appending to it, try again later.
    HEDDLE_LOG(kWarning, "wan: %s: compaction failed (the log keeps growing): %s", path_.c_str(),
               std::string(st.message()).c_str());
    return absl::OkStatus();
  }
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    broken_ = true;
    return Errno("cannot reopen after compaction", path_);
  }
  ::close(fd_);
  fd_ = fd;
  file_bytes_ = bytes.size();
  records_in_file_ = records_.size();
  ++compactions_;
  return absl::OkStatus();
}

}  // namespace heddle::relay
