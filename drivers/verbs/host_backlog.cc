// File: drivers/verbs/host_backlog.cc
#include "drivers/verbs/host_backlog.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace heddle::verbs {
namespace {

constexpr size_t kMinSlots = 16;

uint64_t Mix(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

uint64_t ProcessSeed() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

void Words(const std::array<uint8_t, 16>& ip, uint64_t* lo, uint64_t* hi) {
  std::memcpy(lo, ip.data(), 8);
  std::memcpy(hi, ip.data() + 8, 8);
}

bool SameKey(const HostBacklogIndex::Entry& e, uint64_t lo, uint64_t hi, uint32_t qpn) {
  uint64_t elo, ehi;
  Words(e.peer_ip, &elo, &ehi);
  return e.dest_qpn == qpn && elo == lo && ehi == hi;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Index.

// The backlog keys and the pair keys hash with different salts, so that one array's clusters are
// not the other's.
constexpr uint64_t kBacklogSalt = 0x8ebc6af09c88c6e3ULL;
constexpr uint64_t kPairSalt = 0x1d8e4e27c47d124fULL;

size_t HostBacklogIndex::Home(const std::array<uint8_t, 16>& peer_ip, uint32_t qpn,
                              uint64_t salt) const {
  uint64_t lo, hi;
  Words(peer_ip, &lo, &hi);
  // wyhash-style: two folded 128-bit multiplies, keyed by the seed.
  uint64_t h = Mix(lo ^ seed_ ^ 0xa0761d6478bd642fULL, hi ^ 0xe7037ed1a0b428dbULL) ^
               Mix(qpn ^ seed_ ^ salt, 0x589965cc75374cc3ULL);
  h ^= h >> 29;
  return static_cast<size_t>(h);
}

std::unique_ptr<HostBacklogIndex> HostBacklogIndex::Build(absl::Span<const Entry> entries) {
  std::unique_ptr<HostBacklogIndex> index(new HostBacklogIndex());
  const size_t slots = std::max(kMinSlots, std::bit_ceil(entries.size() * 2));
  index->slots_ = std::make_unique<Slot[]>(slots);
  index->mask_ = slots - 1;
  index->seed_ = ProcessSeed();
  size_t with_local = 0;
  for (const Entry& in : entries) with_local += in.local_qpn != kNoLocalQpn;
  const size_t pair_slots = std::max(kMinSlots, std::bit_ceil(with_local * 2));
  index->pair_slots_ = std::make_unique<PairSlot[]>(pair_slots);
  index->pair_mask_ = pair_slots - 1;
  for (const Entry& in : entries) {
    const uint32_t qpn = in.dest_qpn & shim::kQpnMask;
    uint64_t lo, hi;
    Words(in.peer_ip, &lo, &hi);
    if (in.local_qpn != kNoLocalQpn) {
      const uint32_t local = in.local_qpn & shim::kQpnMask;
      for (size_t i = index->Home(in.peer_ip, local, kPairSalt) & index->pair_mask_;;
           i = (i + 1) & index->pair_mask_) {
        PairSlot& s = index->pair_slots_[i];
        if (s.used == 0) {
          s = PairSlot{in.peer_ip, local, qpn, 1};
          ++index->pairs_;
          break;
        }
        if (s.local_qpn == local && s.peer_ip == in.peer_ip) {
          if (s.dest_qpn != qpn && s.dest_qpn != kNoPair) {
            s.dest_qpn = kNoPair;  // two QPs answer to this key: neither is named
            ++index->ambiguous_pairs_;
          }
          break;
        }
      }
    }
    for (size_t i = index->Home(in.peer_ip, qpn, kBacklogSalt) & index->mask_;;
         i = (i + 1) & index->mask_) {
      Slot& s = index->slots_[i];
      if (s.used == 0) {
        s.used = 1;
        s.entry = in;
        s.entry.dest_qpn = qpn;
        ++index->size_;
        break;
      }
      if (SameKey(s.entry, lo, hi, qpn)) {
        s.entry.backlog_bytes = SaturatingAdd(s.entry.backlog_bytes, in.backlog_bytes);
        s.entry.backlog_wqes = SaturatingAdd(s.entry.backlog_wqes, in.backlog_wqes);
        break;
      }
    }
  }
  return index;
}

const HostBacklogIndex::Entry* HostBacklogIndex::Find(const std::array<uint8_t, 16>& peer_ip,
                                                      uint32_t dest_qpn) const {
  dest_qpn &= shim::kQpnMask;
  uint64_t lo, hi;
  Words(peer_ip, &lo, &hi);
  // Terminates: the array is at most half full, so an unused slot is always ahead.
  for (size_t i = Home(peer_ip, dest_qpn, kBacklogSalt) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.used == 0) return nullptr;
    if (SameKey(s.entry, lo, hi, dest_qpn)) return &s.entry;
  }
}

uint32_t HostBacklogIndex::PairedDestQpn(const std::array<uint8_t, 16>& peer_ip,
                                         uint32_t local_qpn) const {
  local_qpn &= shim::kQpnMask;
  uint64_t lo, hi;
  Words(peer_ip, &lo, &hi);
  // Terminates like Find(): at most half full.
  for (size_t i = Home(peer_ip, local_qpn, kPairSalt) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& s = pair_slots_[i];
    if (s.used == 0) return kNoPair;
    if (s.local_qpn != local_qpn) continue;
    uint64_t slo, shi;
    Words(s.peer_ip, &slo, &shi);
    if (slo == lo && shi == hi) return s.dest_qpn;  // kNoPair when ambiguous
  }
}

// ---------------------------------------------------------------------------------------------
// Reader.

HostBacklogReader::HostBacklogReader(std::string dir, HostBacklogOptions options)
    : dir_(std::move(dir)), options_(options) {}
HostBacklogReader::HostBacklogReader(HostBacklogReader&&) noexcept = default;
HostBacklogReader& HostBacklogReader::operator=(HostBacklogReader&&) noexcept = default;
HostBacklogReader::~HostBacklogReader() = default;

HostBacklogRead HostBacklogReader::Read() {
  HostBacklogRead out;
  entries_.clear();

  // 1. List the directory: "heddle-verbs-<digits>" only (".tmp" files are still being made).
  struct Found {
    std::string name;
    pid_t pid;
    struct stat st;
  };
  std::vector<Found> found;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    const int err = errno;
    out.errors.push_back(
        absl::StrFormat("backlog directory %s: cannot list: %s", dir_, std::strerror(err)));
    tables_.clear();
    refused_.clear();
    out.index = HostBacklogIndex::Build({});
    return out;
  }
  while (dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, shim::kTablePrefix)) continue;
    uint32_t pid = 0;
    if (name.empty() || name.size() > 10 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(name, &pid) || pid == 0 ||
        pid > static_cast<uint32_t>(std::numeric_limits<pid_t>::max())) {
      continue;
    }
    Found f{e->d_name, static_cast<pid_t>(pid), {}};
    if (fstatat(dirfd(d), e->d_name, &f.st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // just went
    found.push_back(std::move(f));
  }
  closedir(d);
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.name < b.name; });

  // 2. Map what is new or replaced, drop what vanished, refuse what is bad.
  std::map<std::string, struct stat> listed;
  for (const Found& f : found) {
    listed.emplace(f.name, f.st);
    const std::string path = absl::StrCat(dir_, "/", f.name);
    auto t = tables_.find(f.name);
    if (t != tables_.end()) {
      if (t->second.reader.device() == f.st.st_dev && t->second.reader.inode() == f.st.st_ino) {
        continue;
      }
      tables_.erase(t);  // a new file under the old name: a new process with a reused pid
    }
    auto r = refused_.find(f.name);
    if (r != refused_.end()) {
      const Refusal& old = r->second;
      if (old.dev == f.st.st_dev && old.ino == f.st.st_ino && old.size == f.st.st_size &&
          old.mtime_ns == MtimeNs(f.st)) {
        out.errors.push_back(old.why);
        continue;
      }
      refused_.erase(r);
    }
    auto refuse = [&](std::string why) {
      out.errors.push_back(why);
      refused_[f.name] =
          Refusal{f.st.st_dev, f.st.st_ino, f.st.st_size, MtimeNs(f.st), std::move(why)};
    };
    if (!S_ISREG(f.st.st_mode)) {  // not even opened: a FIFO or device must not be touched
      refuse(absl::StrFormat("backlog table %s: not a regular file", path));
      continue;
    }
    absl::StatusOr<shim::BacklogReader> opened = shim::BacklogReader::Open(path);
    if (!opened.ok()) {
      refuse(std::string(opened.status().message()));
      continue;
    }
    if (opened->pid() != f.pid) {
      refuse(absl::StrFormat("backlog table %s: header names process %d, not %d", path,
                             opened->pid(), f.pid));
      continue;
    }
    tables_.emplace(f.name, Table(*std::move(opened)));
  }
  std::erase_if(tables_, [&](const auto& kv) { return !listed.contains(kv.first); });
  std::erase_if(refused_, [&](const auto& kv) { return !listed.contains(kv.first); });

  // 3. Read every live QP of every table.
  bool over_limit = false;
  for (auto it = tables_.begin(); it != tables_.end();) {
    Table& t = it->second;
    if (absl::Status s = t.reader.CheckSize(); !s.ok()) {
      // Shrunk or grown under the mapping: never touch it again (a shrunk one would SIGBUS). The
      // refusal holds until the file changes again.
      std::string why(s.message());
      out.errors.push_back(why);
      const struct stat& st = listed.at(it->first);
      refused_[it->first] = Refusal{st.st_dev, st.st_ino, st.st_size, MtimeNs(st), std::move(why)};
      it = tables_.erase(it);
      continue;
    }
    const pid_t pid = t.reader.pid();
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      ++out.dead_writer_tables;
      if (!options_.include_dead_writers) {
        ++it;
        continue;
      }
    }
    ++out.tables;
    out.overflow_events += t.reader.overflow_events();
    const uint64_t claims = t.reader.claims();
    if (!t.claimed_valid || claims != t.claims_seen) {
      t.reader.ClaimedSlots(&t.claimed);
      t.claims_seen = claims;
      t.claimed_valid = true;
    }
    for (uint32_t i : t.claimed) {
      std::optional<shim::QpBacklog> q = t.reader.ReadSlot(i);
      if (!q.has_value()) continue;  // retired (destroyed QP)
      ++out.qps;
      if (!q->has_peer) {
        ++out.qps_without_peer;
        continue;
      }
      if (entries_.size() >= options_.max_qps) {
        over_limit = true;
        continue;
      }
      entries_.push_back(HostBacklogIndex::Entry{
          .peer_ip = q->dgid,
          .dest_qpn = q->dest_qpn,
          .backlog_bytes = q->backlog_bytes(),
          .backlog_wqes = q->backlog_wqes(),
          .local_qpn = q->qpn,
      });
    }
    ++it;
  }
  if (over_limit) {
    out.errors.push_back(absl::StrFormat(
        "backlog directory %s: more than %u connected QPs; the rest are not indexed (raise "
        "max_qps if this host really runs that many)",
        dir_, options_.max_qps));
  }
  out.index = HostBacklogIndex::Build(entries_);
  return out;
}

HostBacklogRead ReadHostBacklog(const std::string& dir) { return HostBacklogReader(dir).Read(); }

}  // namespace heddle::verbs
