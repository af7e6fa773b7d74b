#include "tools/heddled/storm_service.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "drivers/verbs/host_backlog.h"

namespace heddle::heddled {
namespace {

const char* ModeName(storm::Mode m) {
  return m == storm::Mode::kPerPacket ? "per-packet" : "per-message";
}

const char* SourceName(storm::BacklogSource s) {
  switch (s) {
    case storm::BacklogSource::kNone:
      return "none";
    case storm::BacklogSource::kHostShim:
      return "host";
    default:
      return "egress";
  }
}

const char* KindName(uint8_t kind) {
  switch (static_cast<storm::RequestKind>(kind)) {
    case storm::RequestKind::kWrite:
      return "write";
    case storm::RequestKind::kRead:
      return "read";
    case storm::RequestKind::kSend:
      return "send";
    case storm::RequestKind::kAtomic:
      return "atomic";
    default:
      return "-";
  }
}

// Cutoffs for `levels` when the number of levels changes and none were given: the equal-bytes
// ones if sizes were observed, else the default ladder 4 KiB, 64 KiB, 1 MiB, ... (x16 apart).
std::array<uint32_t, storm::kMaxLevels - 1> CutoffsFor(const storm::SizeHistogram& aged,
                                                       int levels) {
  if (auto c = storm::AutoCutoffs(aged, levels)) {
    storm::LevelConfig probe;
    probe.levels = levels;
    probe.cutoffs = *c;
    probe.control_level = static_cast<uint8_t>(levels - 1);
    if (storm::ValidateLevelConfig(probe).ok()) return *c;
  }
  std::array<uint32_t, storm::kMaxLevels - 1> out{};
  uint64_t c = 4096;
  for (int i = 0; i + 1 < levels; ++i, c *= 16) {
    // Strictly increasing even where x16 passes 2^31 (K = 8).
    out[i] = static_cast<uint32_t>(std::min<uint64_t>(c, (uint64_t{1} << 31) + i));
  }
  return out;
}

}  // namespace

StormService::StormService(const config::StormConfig& cfg, int num_workers)
    : cfg_(cfg),
      num_workers_(num_workers),
      control_(std::make_unique<pipeline::StormControl>(cfg.levels, num_workers, cfg.auto_cutoffs)),
      max_levels_(cfg.levels.levels) {
  if (cfg.backlog_source == storm::BacklogSource::kHostShim) {
    host_reader_ = std::make_unique<verbs::HostBacklogReader>(cfg.host_backlog_dir);
  }
}

StormService::~StormService() { StopThread(); }

void StormService::StartThread() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void StormService::StopThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StormService::WorkersStopped() {
  for (int w = 0; w < num_workers_; ++w) control_->Offline(w);
}

void StormService::Run() {
  using Clock = std::chrono::steady_clock;
  const bool host = cfg_.backlog_source == storm::BacklogSource::kHostShim;
  const auto auto_every = std::chrono::milliseconds(cfg_.auto_interval_ms);
  const auto host_every = std::chrono::milliseconds(cfg_.host_poll_ms);
  Clock::time_point next_auto = Clock::now() + auto_every;
  Clock::time_point next_host = Clock::now();
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    if (now >= next_auto) {
      l.unlock();
      AutoTick();
      l.lock();
      next_auto = now + auto_every;
    }
    if (host && now >= next_host) {
      l.unlock();
      HostTick();
      l.lock();
      next_host = now + host_every;
    }
    cv_.wait_until(l, host ? std::min(next_auto, next_host) : next_auto, [this] { return stop_; });
  }
}

void StormService::AutoTick() {
  // The histogram is aged every interval even with static cutoffs, so that `set storm cutoffs
  // auto` starts from recent sizes.
  if (control_->AutoStep(cfg_.auto_keep)) {
    const storm::LevelConfig l = control_->current_levels();
    std::string c;
    for (int i = 0; i + 1 < l.levels; ++i) absl::StrAppend(&c, i ? ", " : "", l.cutoffs[i]);
    HEDDLE_LOG(kInfo, "storm: auto cutoffs now [%s] bytes", c.c_str());
  }
}

void StormService::HostTick() {
  if (!host_reader_) return;
  verbs::HostBacklogRead r = host_reader_->Read();
  {
    std::lock_guard<std::mutex> l(host_mu_);
    host_tables_ = r.tables;
    host_qps_ = r.qps;
    host_pairs_ = r.index->pairs();
    host_ambiguous_pairs_ = r.index->ambiguous_pairs();
    host_errors_ = r.errors;
  }
  std::shared_ptr<const verbs::HostBacklogIndex> index(std::move(r.index));
  if (host_listener_) host_listener_(index);
  control_->PublishHostBacklog(std::move(index));
}

api::StormView StormService::View(const pipeline::StatsSnapshot& snap) const {
  api::StormView v;
  const storm::LevelConfig l = control_->current_levels();
  v.enabled = true;
  v.levels = l.levels;
  v.mode = ModeName(l.mode);
  v.auto_cutoffs = control_->auto_cutoffs();
  for (int i = 0; i + 1 < l.levels; ++i) v.cutoffs.push_back(l.cutoffs[i]);
  v.control_level = l.control_level;
  v.beta = l.beta;
  v.backlog_max = l.backlog_max;
  v.unknown_size = l.unknown_size;
  v.backlog_source = SourceName(cfg_.backlog_source);
  v.generation = control_->published_generation();
  v.auto_interval_ms = cfg_.auto_interval_ms;
  v.auto_publications = control_->auto_publications();
  // Level K-1-i holds R_eff in (c_i, c_{i+1}] (c_0 = 0, c_K = unbounded).
  const int k = l.levels;
  for (int level = 0; level < k; ++level) {
    api::StormLevelView lv;
    lv.level = level;
    lv.dscp = l.dscp[level];
    lv.pcp = l.pcp[level];
    const int i = k - 1 - level;  // cutoffs below this level's range
    lv.r_min = i > 0 ? l.cutoffs[i - 1] : 0;
    lv.r_max = i < k - 1 ? l.cutoffs[i] : 0;
    lv.control = level == l.control_level;
    lv.tagged_packets = snap.storm_level_packets[level];
    lv.tagged_bytes = snap.storm_level_bytes[level];
    lv.egress_tx_packets = snap.egress_level_tx[level];
    lv.egress_drops = snap.egress_level_drops[level];
    lv.egress_queue_depth = snap.egress_level_depth[level];
    v.per_level.push_back(lv);
  }
  const pipeline::StormWorkerCounters c = control_->counters();
  v.qp_live = c.qp_live;
  v.qp_capacity = c.qp_capacity;
  v.qp_table_full = c.qp_table_full;
  v.qp_evicted_idle = c.qp_evicted_idle;
  v.qp_evicted_on_insert = c.qp_evicted_on_insert;
  v.requests_started = c.requests_started;
  v.requests_completed = c.requests_completed;
  v.orphans = c.orphans;
  v.abandoned = c.abandoned;
  v.duplicates = c.duplicates;
  v.psn_jumps = c.psn_jumps;
  v.bogus_length = c.bogus_length;
  v.overrun = c.overrun;
  v.host_backlog_hits = c.host_backlog_hits;
  v.resp_joined_local = c.resp_joined_local;
  v.resp_joined_remote = c.resp_joined_remote;
  v.resp_no_pair = c.resp_no_pair;
  v.resp_no_entry = c.resp_no_entry;
  v.resp_ring_full = c.resp_ring_full;
  v.resp_malformed = c.resp_malformed;
  v.acks_advanced = c.acks_advanced;
  v.acks_old = c.acks_old;
  v.acks_ahead = c.acks_ahead;
  v.fabric_guarded = c.fabric_guarded;
  v.read_sized = c.read_sized;
  v.read_unknown = c.read_unknown;
  v.read_orphans = c.read_orphans;
  v.read_late = c.read_late;
  v.read_duplicates = c.read_duplicates;
  v.read_psn_jumps = c.read_psn_jumps;
  v.read_abandoned = c.read_abandoned;
  v.read_overrun = c.read_overrun;
  v.read_malformed = c.read_malformed;
  v.read_live = c.read_live;
  v.read_capacity = c.read_capacity;
  v.read_table_full = c.read_table_full;
  v.read_evicted = c.read_evicted;
  v.response_guarded = c.response_guarded;
  v.rreq_local = c.rreq_local;
  v.rreq_remote = c.rreq_remote;
  v.rreq_no_pair = c.rreq_no_pair;
  v.rreq_no_entry = c.rreq_no_entry;
  v.rreq_ring_full = c.rreq_ring_full;
  v.rreq_malformed = c.rreq_malformed;
  v.rreq_pending_full = c.rreq_pending_full;
  v.rreq_stale = c.rreq_stale;
  v.rreq_too_late = c.rreq_too_late;
  {
    std::lock_guard<std::mutex> g(host_mu_);
    v.host_tables = host_tables_;
    v.host_qps = host_qps_;
    v.host_pairs = host_pairs_;
    v.host_ambiguous_pairs = host_ambiguous_pairs_;
    v.host_errors = host_errors_;
  }
  return v;
}

absl::StatusOr<std::vector<api::QpView>> StormService::ListQps(uint32_t top,
                                                               const std::string& sort) {
  pipeline::QpSort s;
  if (sort.empty() || sort == "backlog") {
    s = pipeline::QpSort::kBacklog;
  } else if (sort == "remaining") {
    s = pipeline::QpSort::kRemaining;
  } else if (sort == "idle") {
    s = pipeline::QpSort::kIdle;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("sort \"", sort, "\" is not one of backlog, remaining, idle"));
  }
  absl::StatusOr<std::vector<pipeline::QpRow>> rows =
      control_->TopQps(static_cast<int>(top), s, absl::Seconds(2));
  if (!rows.ok()) return rows.status();
  std::vector<api::QpView> out;
  for (const pipeline::QpRow& r : *rows) {
    api::QpView q;
    q.worker = r.worker;
    q.qpn = r.qpn;
    q.direction = r.direction ? "response" : "request";
    q.kind = KindName(r.kind);
    q.level = r.level;
    if (r.dst_ip4 != 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &r.dst_ip4, buf, sizeof buf);
      q.dst = buf;
    } else {
      q.dst = "ipv6";
    }
    q.size_known = r.flags & storm::kEntrySizeKnown;
    q.in_progress = r.flags & storm::kEntryInProgress;
    q.size = r.size;
    q.sent = r.sent;
    q.remaining = r.remaining;
    q.backlog_bytes = r.backlog;
    q.egress_held = r.egress_held;
    q.host_backlog = r.host_backlog;
    q.completed = r.completed;
    q.idle_ms = r.idle_ms;
    if (r.acked_psn != storm::kNoPsn && r.unacked != storm::kNoPsn) {
      q.acked = true;
      q.acked_psn = r.acked_psn;
      q.unacked = r.unacked;
    }
    out.push_back(std::move(q));
  }
  return out;
}

absl::Status StormService::Apply(const api::StormUpdate& u, config::StormConfig* cfg) {
  std::lock_guard<std::mutex> g(apply_mu_);
  // The storm thread's AutoStep may publish between our read and our publication: publish only
  // on the generation we read, else re-read and retry, so neither change is lost.
  for (int attempt = 0;; ++attempt) {
    absl::Status s = ApplyOnce(u, cfg);
    if (!absl::IsAborted(s) || attempt == 3) return s;
  }
}

absl::Status StormService::ApplyOnce(const api::StormUpdate& u, config::StormConfig* cfg) {
  const pipeline::StormControl::Current now = control_->current();
  storm::LevelConfig next = now.levels;
  bool auto_next = now.auto_cutoffs;
  if (u.cutoffs && u.cutoffs_auto) {
    return absl::InvalidArgumentError("give either cutoffs or cutoffs auto, not both");
  }
  if (u.levels) {
    if (*u.levels < 1 || *u.levels > storm::kMaxLevels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.levels: ", *u.levels, " is out of range; use 1..", storm::kMaxLevels));
    }
    const int k = static_cast<int>(*u.levels);
    if (k != next.levels) {
      next.levels = k;
      if (!u.cutoffs && !u.cutoffs_auto && !auto_next) {
        return absl::InvalidArgumentError(
            absl::StrCat("storm.levels: going from ", now.levels.levels, " to ", k,
                         " levels needs ", k - 1, " cutoffs (--cutoffs) or auto cutoffs"));
      }
      if (!u.cutoffs) next.cutoffs = CutoffsFor(control_->aged_histogram(), k);
      if (!u.control_level) next.control_level = static_cast<uint8_t>(k - 1);
      // DSCP/PCP not given: stretch the old per-level values over the new levels, so the top
      // level keeps the top (control) DSCP and the bottom the bottom one, rather than shifting
      // control traffic into another switch class by index.
      const int old_k = now.levels.levels;
      for (int j = 0; j < k; ++j) {
        const int from = k == 1 ? old_k - 1 : (j * (old_k - 1) + (k - 1) / 2) / (k - 1);
        next.dscp[j] = now.levels.dscp[from];
        next.pcp[j] = now.levels.pcp[from];
      }
    }
  }
  const int k = next.levels;
  if (u.cutoffs) {
    if (static_cast<int>(u.cutoffs->size()) != k - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.cutoffs: ", u.cutoffs->size(), " value(s) given; ", k, " levels need ", k - 1));
    }
    next.cutoffs.fill(0);
    for (int i = 0; i + 1 < k; ++i) {
      if ((*u.cutoffs)[i] == 0 || (*u.cutoffs)[i] > UINT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("storm.cutoffs[", i, "]: ", (*u.cutoffs)[i],
                                                       " is out of range; use 1..", UINT32_MAX));
      }
      next.cutoffs[i] = static_cast<uint32_t>((*u.cutoffs)[i]);
    }
    auto_next = false;
  }
  if (u.cutoffs_auto) auto_next = true;
  for (int i = std::max(k - 1, 0); i < storm::kMaxLevels - 1; ++i) next.cutoffs[i] = 0;
  if (u.mode) {
    if (*u.mode == "per-message") {
      next.mode = storm::Mode::kPerMessage;
    } else if (*u.mode == "per-packet") {
      next.mode = storm::Mode::kPerPacket;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.mode: \"", *u.mode, "\" is not a mode; use per-message or per-packet"));
    }
  }
  if (u.dscp) {
    if (static_cast<int>(u.dscp->size()) != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("storm.dscp: ", u.dscp->size(), " value(s) given; ", k, " levels need ", k));
    }
    for (int i = 0; i < k; ++i) {
      if ((*u.dscp)[i] > 63) {
        return absl::InvalidArgumentError(
            absl::StrCat("storm.dscp[", i, "]: ", (*u.dscp)[i], " is not a DSCP (0..63)"));
      }
      next.dscp[i] = static_cast<uint8_t>((*u.dscp)[i]);
    }
  }
  if (u.pcp) {
    if (static_cast<int>(u.pcp->size()) != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("storm.pcp: ", u.pcp->size(), " value(s) given; ", k, " levels need ", k));
    }
    for (int i = 0; i < k; ++i) {
      if ((*u.pcp)[i] < -1 || (*u.pcp)[i] > 7) {
        return absl::InvalidArgumentError(absl::StrCat("storm.pcp[", i, "]: ", (*u.pcp)[i],
                                                       " is not a PCP (0..7, or -1 to keep)"));
      }
      next.pcp[i] = static_cast<int8_t>((*u.pcp)[i]);
    }
  }
  if (u.control_level) {
    if (*u.control_level >= static_cast<uint32_t>(k)) {
      return absl::InvalidArgumentError(absl::StrCat("storm.control_level: ", *u.control_level,
                                                     " is not a level; use 0..", k - 1));
    }
    next.control_level = static_cast<uint8_t>(*u.control_level);
  }
  if (u.beta) next.beta = *u.beta;
  if (u.unknown_size) next.unknown_size = *u.unknown_size;
  if (absl::Status s = storm::ValidateLevelConfig(next); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  // Before the publication: a scrape in between exports one series too many, never too few.
  if (next.levels > max_levels_.load(std::memory_order_relaxed)) {
    max_levels_.store(next.levels, std::memory_order_relaxed);
  }
  if (absl::Status s = control_->SetLevels(next, auto_next, now.generation); !s.ok()) return s;
  if (cfg != nullptr) {
    cfg->levels = next;
    cfg->auto_cutoffs = auto_next;
  }
  HEDDLE_LOG(kInfo, "storm: levels updated (generation %llu)",
             static_cast<unsigned long long>(control_->published_generation()));
  return absl::OkStatus();
}

}  // namespace heddle::heddled
