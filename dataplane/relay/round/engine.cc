#include "dataplane/relay/round/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace heddle::relay {

const char* MissingPolicyName(MissingPolicy p) {
  return p == MissingPolicy::kAbort ? "abort" : "renormalize";
}

absl::StatusOr<MissingPolicy> ParseMissingPolicy(std::string_view name) {
  if (name == "renormalize") return MissingPolicy::kRenormalize;
  if (name == "abort") return MissingPolicy::kAbort;
  return absl::InvalidArgumentError(absl::StrFormat(
      "missing-worker policy \"%s\": expected renormalize or abort", std::string(name)));
}

absl::Status ValidateRoundPolicy(const RoundPolicy& p) {
  if (p.push_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("round policy: push_timeout must be positive");
  }
  if (!(p.min_token_fraction >= 0.0 && p.min_token_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round policy: min_token_fraction %g must be within [0, 1]", p.min_token_fraction));
  }
  if (p.liveness_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("round policy: liveness_timeout must be positive");
  }
  if (p.keep_rounds < 1 || p.keep_rounds > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("round policy: keep_rounds %u must be 1..4096", p.keep_rounds));
  }
  if (p.max_workers < 1) return absl::InvalidArgumentError("round policy: max_workers must be ≥ 1");
  if (p.min_workers < 1 || p.min_workers > p.max_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round policy: min_workers %u must be 1..max_workers (%u)", p.min_workers, p.max_workers));
  }
  return absl::OkStatus();
}

namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// RoundOutcome::retained_by_gateway where the exchange header defines it, false where not.
template <typename O>
bool RetainedField(const O& o) {
  if constexpr (requires { o.retained_by_gateway; }) {
    return o.retained_by_gateway;
  } else {
    return false;
  }
}

const char* StateName(int s) {
  static const char* const kNames[] = {"collecting", "open", "closed",
                                       "submitting", "wan",  "resolved"};
  return kNames[s];
}

bool ValidName(std::string_view n) {
  if (n.empty() || n.size() > 128) return false;
  for (char c : n) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RoundEngine>> RoundEngine::Create(
    EngineOptions options, std::unique_ptr<WanExchange> exchange) {
  HEDDLE_RETURN_IF_ERROR(ValidateModelSpec(options.spec));
  HEDDLE_RETURN_IF_ERROR(ValidateRoundPolicy(options.policy));
  if (exchange == nullptr) return absl::InvalidArgumentError("round engine: no WAN exchange");
  if (!options.now) return absl::InvalidArgumentError("round engine: no clock");
  std::unique_ptr<RoundEngine> e(new RoundEngine(std::move(options), std::move(exchange)));
  e->Start();
  return e;
}

RoundEngine::RoundEngine(EngineOptions options, std::unique_ptr<WanExchange> exchange)
    : options_(std::move(options)),
      slices_(Slices(options_.spec)),
      round_frame_bytes_([this] {
        uint64_t b = 0;
        for (const SliceRef& s : slices_) b += FrameBytes(s.count, options_.spec.chunk_size);
        return b;
      }()),
      exchange_(std::move(exchange)) {}

void RoundEngine::Start() {
  {
    absl::MutexLock l(&mu_);
    Collecting();
  }
  exchange_->SetOutcomeCallback(
      [this](uint64_t round_id, RoundOutcome outcome) { OnOutcome(round_id, std::move(outcome)); });
  aggregation_thread_ = std::thread([this] { AggregationLoop(); });
}

RoundEngine::~RoundEngine() {
  // Detach from the exchange first: no callback can run once this returns.
  exchange_->SetOutcomeCallback(nullptr);
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (aggregation_thread_.joinable()) aggregation_thread_.join();
  exchange_.reset();
}

RoundEngine::Round& RoundEngine::Collecting() {
  Round& r = rounds_[collecting_];
  if (r.id == 0) {
    r.id = collecting_;
    r.stats.round_id = collecting_;
  }
  return r;
}

absl::StatusOr<JoinResult> RoundEngine::Join(const JoinRequest& request) {
  if (!ValidName(request.name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "join: worker name \"%s\" must be 1..128 printable ASCII characters without spaces",
        request.name.substr(0, 160)));
  }
  if (request.spec_digest != 0 && request.spec_digest != SpecDigest(options_.spec)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "join: worker \"%s\" holds model spec digest %016x, region %u's relay has %016x; load "
        "the relay's model spec (it is in the join reply) or fix the relay's model: block",
        request.name, request.spec_digest, options_.region_id, SpecDigest(options_.spec)));
  }
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.now();
  auto it = ids_.find(request.name);
  Member* m = nullptr;
  bool rejoined = false;
  if (it != ids_.end()) {
    m = &members_[it->second];
    rejoined = m->member;
  } else {
    uint32_t current = 0;
    for (const auto& [id, mem] : members_) current += mem.member;
    if (current >= options_.policy.max_workers) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("join: region %u has its maximum of %u workers; raise round.max_workers",
                          options_.region_id, options_.policy.max_workers));
    }
  }
  const bool plan_it = options_.planner != nullptr && request.planner_spec.has_value() &&
                       (m == nullptr || !m->planned);
  if (plan_it) {
    planner::WorkerSpec ws = *request.planner_spec;
    ws.id = request.name;
    absl::Status s = options_.planner->AddWorker(ws);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrFormat("join: worker \"%s\": planner: %s", request.name, s.message()));
    }
  }
  if (m == nullptr) {
    uint32_t id = next_sender_++;
    ids_[request.name] = id;
    m = &members_[id];
    m->name = request.name;
    m->sender_id = id;
  }
  m->member = true;
  m->left_reason.clear();
  m->last_seen = now;
  m->planned = m->planned || plan_it;

  MaybeOpenLocked();  // this join may assemble the region (round.min_workers)
  Round& c = Collecting();
  uint64_t first = collecting_;
  if (c.state == State::kOpen &&
      (!c.expected.count(m->sender_id) || c.pushes.count(m->sender_id))) {
    first = collecting_ + 1;
  }
  HEDDLE_LOG(kInfo, "relay region %u: worker %s %s as sender %u, first round %llu",
             options_.region_id, m->name.c_str(), rejoined ? "rejoined" : "joined", m->sender_id,
             static_cast<unsigned long long>(first));
  return JoinResult{.sender_id = m->sender_id, .first_round = first, .rejoined = rejoined};
}

absl::Status RoundEngine::MemberCheckLocked(uint32_t sender_id) {
  auto it = members_.find(sender_id);
  if (it == members_.end()) {
    Count("not_member");
    return absl::NotFoundError(absl::StrFormat(
        "sender id %u has not joined region %u; call Join first", sender_id, options_.region_id));
  }
  if (!it->second.member) {
    Count("not_member");
    return absl::PermissionDeniedError(absl::StrFormat(
        "worker \"%s\" (sender %u) is no longer a member of region %u (%s); join again",
        it->second.name, sender_id, options_.region_id, it->second.left_reason));
  }
  return absl::OkStatus();
}

absl::Status RoundEngine::RoundCheckLocked(const Member& m, uint64_t round_id) {
  if (round_id == collecting_) {
    const Round& c = rounds_.at(collecting_);
    if (c.pushes.count(m.sender_id)) {
      Count("duplicate");
      return absl::AlreadyExistsError(absl::StrFormat(
          "worker \"%s\" (sender %u) already pushed round %u", m.name, m.sender_id, round_id));
    }
    if (c.state == State::kOpen && !c.expected.count(m.sender_id)) {
      Count("not_expected");
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker \"%s\" (sender %u) joined after round %u opened; its first round is %u", m.name,
          m.sender_id, round_id, round_id + 1));
    }
    return absl::OkStatus();
  }
  if (round_id < collecting_) {
    auto it = rounds_.find(round_id);
    if (it != rounds_.end() && it->second.pushed.count(m.sender_id)) {
      Count("duplicate");
      return absl::AlreadyExistsError(absl::StrFormat(
          "worker \"%s\" (sender %u) already pushed round %u", m.name, m.sender_id, round_id));
    }
    Count("wrong_round");
    return absl::FailedPreconditionError(absl::StrFormat(
        "push for round %u from worker \"%s\" refused: round %u is closed; the relay now "
        "collects round %u (pull round %u, then push round %u)",
        round_id, m.name, round_id, collecting_, round_id, collecting_));
  }
  Count("wrong_round");
  return absl::FailedPreconditionError(absl::StrFormat(
      "push for round %u from worker \"%s\" refused: round %u has not begun; the relay collects "
      "round %u",
      round_id, m.name, round_id, collecting_));
}

absl::Status RoundEngine::Touch(uint32_t sender_id) {
  absl::MutexLock l(&mu_);
  HEDDLE_RETURN_IF_ERROR(MemberCheckLocked(sender_id));
  members_[sender_id].last_seen = options_.now();
  return absl::OkStatus();
}

absl::Status RoundEngine::CheckPush(uint32_t sender_id, uint64_t round_id) {
  absl::MutexLock l(&mu_);
  HEDDLE_RETURN_IF_ERROR(MemberCheckLocked(sender_id));
  Member& m = members_[sender_id];
  m.last_seen = options_.now();
  return RoundCheckLocked(m, round_id);
}

absl::Status RoundEngine::Push(uint32_t sender_id, uint64_t round_id,
                               std::vector<std::vector<uint8_t>> frames) {
  // Validate everything before taking the lock: the CRC pass is the expensive part.
  auto refuse = [&](const char* reason, absl::Status s) {
    absl::MutexLock l(&mu_);
    Count(reason);
    return s;
  };
  if (frames.size() != slices_.size()) {
    return refuse("malformed",
                  absl::InvalidArgumentError(absl::StrFormat(
                      "push of round %u from sender %u: %u frames, the model has %u slices",
                      round_id, sender_id, frames.size(), slices_.size())));
  }
  WorkerPush push;
  push.frames.reserve(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const SliceRef& s = slices_[i];
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(frames[i]));
    absl::StatusOr<FrameView> f = ParseFrame(*bytes);
    if (!f.ok()) {
      return refuse(
          "malformed",
          absl::Status(f.status().code(), absl::StrFormat("push of round %u from sender %u, "
                                                          "slice %u (tensor %u offset %u): %s",
                                                          round_id, sender_id, s.index, s.tensor_id,
                                                          s.offset, f.status().message())));
    }
    if (f->header().round_id != round_id) {
      return refuse("wrong_round",
                    absl::FailedPreconditionError(absl::StrFormat(
                        "push of round %u from sender %u, slice %u: the frame is of round %u "
                        "(replayed or stale); re-encode it for round %u",
                        round_id, sender_id, s.index, f->header().round_id, round_id)));
    }
    absl::Status c = CheckFrameForSlice(*f, options_.spec, s, round_id, sender_id);
    if (!c.ok()) {
      return refuse("malformed",
                    absl::Status(c.code(), absl::StrFormat("push of round %u from sender %u: %s",
                                                           round_id, sender_id, c.message())));
    }
    if (i == 0) {
      push.tokens = f->header().token_count;
      push.inner_steps = f->header().inner_steps;
    } else if (f->header().token_count != push.tokens ||
               f->header().inner_steps != push.inner_steps) {
      return refuse("inconsistent",
                    absl::InvalidArgumentError(absl::StrFormat(
                        "push of round %u from sender %u: slice %u carries %u tokens and %u "
                        "inner steps, slice 0 carried %u and %u; every slice of a push must "
                        "carry the same counts",
                        round_id, sender_id, s.index, f->header().token_count,
                        f->header().inner_steps, push.tokens, push.inner_steps)));
    }
    push.bytes += bytes->size();
    push.frames.push_back({std::move(bytes), *f});
  }

  absl::MutexLock l(&mu_);
  HEDDLE_RETURN_IF_ERROR(MemberCheckLocked(sender_id));
  Member& m = members_[sender_id];
  const absl::Time now = options_.now();
  m.last_seen = now;
  HEDDLE_RETURN_IF_ERROR(RoundCheckLocked(m, round_id));
  Round& c = Collecting();
  c.stats.bytes_in += push.bytes;
  bytes_in_total_ += push.bytes;
  m.last_pushed_round = round_id;
  m.last_tokens = push.tokens;
  c.pushed.insert(sender_id);
  c.pushes.emplace(sender_id, std::move(push));
  MaybeOpenLocked();
  MaybeCloseLocked(now >= c.deadline);
  return absl::OkStatus();
}

absl::Status RoundEngine::Leave(uint32_t sender_id) {
  absl::MutexLock l(&mu_);
  HEDDLE_RETURN_IF_ERROR(MemberCheckLocked(sender_id));
  RemoveMemberLocked(members_[sender_id], "left");
  MaybeCloseLocked(false);
  return absl::OkStatus();
}

void RoundEngine::RemoveMemberLocked(Member& m, std::string reason) {
  m.member = false;
  m.left_reason = std::move(reason);
  if (m.planned && options_.planner != nullptr) {
    absl::Status s = options_.planner->RemoveWorker(m.name);
    if (!s.ok()) {
      HEDDLE_LOG(kWarning, "relay region %u: planner: removing %s: %s", options_.region_id,
                 m.name.c_str(), std::string(s.message()).c_str());
    }
    m.planned = false;
  }
  HEDDLE_LOG(kInfo, "relay region %u: worker %s (sender %u) %s", options_.region_id, m.name.c_str(),
             m.sender_id, m.left_reason.c_str());
}

void RoundEngine::MaybeOpenLocked() {
  Round& c = Collecting();
  if (c.state != State::kCollecting || c.pushes.empty()) return;
  uint32_t members = 0;
  for (const auto& [id, mem] : members_) members += mem.member;
  if (members < options_.policy.min_workers) return;  // not assembled yet: keep collecting
  const absl::Time now = options_.now();
  c.state = State::kOpen;
  c.opened_at = now;
  c.deadline = now + options_.policy.push_timeout;
  for (const auto& [id, mem] : members_) {
    if (mem.member) c.expected.insert(id);
  }
}

void RoundEngine::MaybeCloseLocked(bool deadline_passed) {
  Round& c = Collecting();
  if (c.state != State::kOpen) return;
  bool all = true;
  bool someone_left = false;
  for (uint32_t id : c.expected) {
    if (c.pushes.count(id)) continue;
    if (!members_[id].member) {
      someone_left = true;
      continue;
    }
    all = false;
  }
  if (all) {
    CloseLocked(c, someone_left ? "members left" : "complete");
  } else if (deadline_passed) {
    CloseLocked(c, "deadline");
  }
}

uint64_t RoundEngine::ExpectedTokensLocked(const Member& m, const Round& r,
                                           const std::optional<planner::Plan>& plan) {
  if (plan.has_value()) {
    for (const planner::WorkerAssignment& a : plan->workers) {
      if (a.worker_id == m.name && a.tokens > 0) return static_cast<uint64_t>(a.tokens);
    }
  }
  if (m.last_tokens > 0) return m.last_tokens;
  if (r.pushes.empty()) return 0;
  uint64_t sum = 0;
  for (const auto& [id, p] : r.pushes) sum += p.tokens;
  return sum / r.pushes.size();
}

void RoundEngine::CloseLocked(Round& r, std::string reason) {
  const absl::Time now = options_.now();
  r.state = State::kClosed;
  r.closed_at = now;
  r.stats.close_reason = reason;
  r.stats.wait_s = Seconds(now - r.opened_at);
  std::optional<planner::Plan> plan;
  if (options_.planner != nullptr) {
    absl::StatusOr<planner::Plan> p = options_.planner->CurrentPlan();
    if (p.ok()) plan = *std::move(p);
  }
  uint64_t present = 0, expected_total = 0;
  std::vector<std::string> missing;
  for (uint32_t id : r.expected) {
    const Member& m = members_[id];
    auto p = r.pushes.find(id);
    if (p != r.pushes.end()) {
      present += p->second.tokens;
      expected_total += p->second.tokens;
      r.expected_tokens[id] = p->second.tokens;
      continue;
    }
    uint64_t e = ExpectedTokensLocked(m, r, plan);
    r.expected_tokens[id] = e;
    expected_total += e;
    missing.push_back(absl::StrFormat("%s (sender %u)", m.name, id));
    r.exclusion[id] =
        m.member ? absl::StrFormat("no push from this worker by round %u's deadline", r.id)
                 : absl::StrFormat("left the region during round %u (%s)", r.id, m.left_reason);
  }
  if (!missing.empty() && options_.policy.missing == MissingPolicy::kAbort) {
    r.region_exclusion =
        absl::StrFormat("policy abort: %u of %u expected workers missing at the close (%s): %s",
                        missing.size(), r.expected.size(), reason, absl::StrJoin(missing, ", "));
  } else if (!missing.empty() &&
             static_cast<double>(present) <
                 options_.policy.min_token_fraction * static_cast<double>(expected_total)) {
    r.region_exclusion = absl::StrFormat(
        "below quorum: present workers hold %u of %u expected tokens (%.3f < min_token_fraction "
        "%.3f); missing: %s",
        present, expected_total,
        expected_total ? static_cast<double>(present) / static_cast<double>(expected_total) : 0.0,
        options_.policy.min_token_fraction, absl::StrJoin(missing, ", "));
  }
  double tau_eff = 0;
  if (r.region_exclusion.empty()) {
    for (const auto& [id, p] : r.pushes) {  // increasing sender id
      r.included.insert(id);
      tau_eff += static_cast<double>(p.tokens) / static_cast<double>(present) * p.inner_steps;
    }
  } else {
    for (const auto& [id, p] : r.pushes) {
      r.exclusion[id] = absl::StrFormat("region %u sat out round %u: %s", options_.region_id, r.id,
                                        r.region_exclusion);
    }
    HEDDLE_LOG(kWarning, "relay region %u: round %llu: %s", options_.region_id,
               static_cast<unsigned long long>(r.id), r.region_exclusion.c_str());
  }
  r.stats.expected = r.expected.size();
  r.stats.pushed = r.pushes.size();
  r.stats.included = r.included.size();
  r.stats.tokens = r.included.empty() ? 0 : present;
  r.stats.expected_tokens = expected_total;
  r.stats.tau_eff = tau_eff;
  r.stats.region_exclusion = r.region_exclusion;
  if (!r.included.empty() && r.stats.bytes_in > 0) {
    uint64_t in = 0;
    for (uint32_t id : r.included) in += r.pushes.at(id).bytes;
    r.stats.compression_ratio = static_cast<double>(r.included.size()) * 4.0 *
                                static_cast<double>(TotalElements(options_.spec)) /
                                static_cast<double>(in);
  }
  collecting_ = r.id + 1;
  Collecting();
}

void RoundEngine::AggregationLoop() {
  for (;;) {
    uint64_t next = 0;
    {
      absl::MutexLock l(&mu_);
      // The oldest unresolved round, once it is closed: rounds go to the exchange in order.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (stopping_) return true;
        for (const auto& [id, r] : rounds_) {
          if (r.state == State::kResolved) continue;
          return r.state == State::kClosed;
        }
        return false;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      for (auto& [id, r] : rounds_) {
        if (r.state == State::kResolved) continue;
        r.state = State::kSubmitting;
        next = id;
        break;
      }
    }
    SubmitRound(next);
  }
}

void RoundEngine::SubmitRound(uint64_t round_id) {
  // Copy out under the lock; the frames are immutable and shared.
  std::vector<std::vector<FrameView>> per_slice(slices_.size());
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> keep;
  RegionSummary summary{.round_id = round_id, .region_id = options_.region_id};
  {
    absl::MutexLock l(&mu_);
    auto it = rounds_.find(round_id);
    if (it == rounds_.end() || it->second.state == State::kResolved) return;
    Round& r = it->second;
    if (r.region_exclusion.empty()) {
      for (uint32_t id : r.included) {
        const WorkerPush& p = r.pushes.at(id);
        for (size_t s = 0; s < p.frames.size(); ++s) {
          per_slice[s].push_back(p.frames[s].view);
          keep.push_back(p.frames[s].bytes);
        }
      }
      summary.tokens = r.stats.tokens;
      summary.tau_eff = r.stats.tau_eff;
      summary.workers = r.included.size();
    }
  }
  const absl::Time start = options_.now();
  absl::Status st;
  if (summary.tokens > 0) {
    uint64_t max_count = 0;
    for (const SliceRef& s : slices_) max_count = std::max(max_count, s.count);
    std::vector<float> buf(max_count);  // the one fp32 slice buffer of this round
    Aggregator agg(summary.workers);
    for (const SliceRef& s : slices_) {
      {
        absl::MutexLock l(&mu_);
        auto it = rounds_.find(round_id);  // resolved meanwhile (and maybe pruned): stop
        if (stopping_ || it == rounds_.end() || it->second.state == State::kResolved) break;
      }
      std::span<float> out(buf.data(), s.count);
      st = agg.Aggregate(per_slice[s.index], {.weighting = options_.policy.weighting}, out);
      if (st.ok()) st = exchange_->SubmitSlice(round_id, s, out);
      if (!st.ok()) {
        st = absl::Status(st.code(),
                          absl::StrFormat("round %u, slice %u (tensor %u offset %u): %s", round_id,
                                          s.index, s.tensor_id, s.offset, st.message()));
        break;
      }
    }
  }
  per_slice.clear();
  keep.clear();
  {
    absl::MutexLock l(&mu_);
    auto it = rounds_.find(round_id);
    if (it == rounds_.end()) return;
    Round& r = it->second;
    const absl::Time now = options_.now();
    r.stats.aggregate_s = Seconds(now - start);
    r.finished_at = now;
    r.pushes.clear();  // frames no longer needed: free them now
    if (r.state == State::kResolved || stopping_) return;
    if (!st.ok()) {
      // Never a partial region aggregate: the region contributes nothing this round.
      r.region_exclusion = absl::StrFormat("aggregation failed: %s", st.message());
      r.stats.region_exclusion = r.region_exclusion;
      for (uint32_t id : r.included) r.exclusion[id] = r.region_exclusion;
      r.included.clear();
      summary.tokens = 0;
      summary.tau_eff = 1.0;
      summary.workers = 0;
      HEDDLE_LOG(kError, "relay region %u: round %llu: %s", options_.region_id,
                 static_cast<unsigned long long>(round_id), r.region_exclusion.c_str());
    }
    r.state = State::kWan;
  }
  absl::Status f = exchange_->FinishRegion(summary);
  if (!f.ok()) {
    absl::MutexLock l(&mu_);
    auto it = rounds_.find(round_id);
    if (it != rounds_.end() && it->second.state != State::kResolved) {
      Round& r = it->second;
      ResolveLocked(r, {.kind = RoundOutcome::Kind::kAborted,
                        .reason = absl::Status(
                            f.code(), absl::StrFormat("the WAN exchange refused round %u: %s",
                                                      round_id, f.message()))});
    }
  }
}

void RoundEngine::OnOutcome(uint64_t round_id, RoundOutcome outcome) {
  absl::MutexLock l(&mu_);
  if (stopping_) return;
  // Outcomes come in round order; an earlier round still unresolved would never get one, and
  // would hold up every later submission: resolve it as aborted.
  std::vector<uint64_t> stale;
  for (const auto& [id, r] : rounds_) {
    if (id < round_id && r.state != State::kResolved) stale.push_back(id);
  }
  for (uint64_t id : stale) {
    auto it = rounds_.find(id);
    if (it == rounds_.end()) continue;
    Round& r = it->second;
    if (r.state == State::kOpen) CloseLocked(r, "superseded");
    HEDDLE_LOG(kWarning,
               "relay region %u: round %llu resolved without an outcome (round %llu's came)",
               options_.region_id, static_cast<unsigned long long>(id),
               static_cast<unsigned long long>(round_id));
    ResolveLocked(
        r, {.kind = RoundOutcome::Kind::kAborted,
            .reason = absl::InternalError(absl::StrFormat(
                "the WAN exchange gave no outcome for round %u before round %u's", id, round_id))});
  }
  if (round_id >= collecting_) {
    // Published (or aborted) without this region's part: stop collecting it; rounds between
    // never began here.
    Round& c = Collecting();
    if (round_id == collecting_ && c.state == State::kOpen) {
      CloseLocked(c, "published without us");
    }
    collecting_ = round_id + 1;
    Collecting();
  }
  Round& r = rounds_[round_id];
  if (r.id == 0) {
    r.id = round_id;
    r.stats.round_id = round_id;
  }
  if (r.state == State::kResolved) return;
  ResolveLocked(r, outcome);
}

void RoundEngine::ResolveLocked(Round& r, const RoundOutcome& outcome) {
  const absl::Time now = options_.now();
  r.kind = outcome.kind;
  r.reason = outcome.reason;
  r.aggregate = outcome.aggregate;
  r.region_in_aggregate =
      outcome.kind == RoundOutcome::Kind::kPublished && outcome.includes_this_region;
  // Only a region whose part reached the exchange can have been kept there.
  const bool reached_exchange = r.state == State::kWan || r.state == State::kSubmitting;
  r.region_retained = !r.region_in_aggregate && reached_exchange && !r.included.empty() &&
                      (options_.retained_by_gateway ? options_.retained_by_gateway(outcome)
                                                    : RetainedField(outcome));
  if (outcome.kind == RoundOutcome::Kind::kPublished && !r.region_in_aggregate &&
      !r.included.empty()) {
    std::string why =
        absl::StrFormat("round %u was published without region %u", r.id, options_.region_id);
    for (uint32_t id : r.included) r.exclusion[id] = why;
    if (r.region_exclusion.empty()) r.region_exclusion = why;
  }
  if (r.state == State::kOpen || r.state == State::kCollecting) r.closed_at = now;
  const bool submitted = r.state == State::kWan;
  r.state = State::kResolved;
  r.resolved_at = now;
  r.stats.state = outcome.kind == RoundOutcome::Kind::kPublished ? "published" : "aborted";
  r.stats.region_included = r.region_in_aggregate;
  r.stats.region_exclusion = r.region_exclusion;
  if (submitted) r.stats.wan_s = Seconds(now - r.finished_at);
  if (r.aggregate != nullptr) {
    r.stats.digest = r.aggregate->digest;
    r.stats.global_regions = r.aggregate->parts.size();
  }
  for (auto& [id, m] : members_) {
    if (!r.expected.count(id)) continue;
    if (r.included.count(id) && r.region_in_aggregate) {
      ++m.rounds_included;
    } else {
      ++m.rounds_excluded;
    }
  }
  if (outcome.kind == RoundOutcome::Kind::kPublished) {
    ++rounds_published_;
  } else {
    ++rounds_aborted_;
  }
  last_resolved_ = std::max(last_resolved_, r.id);
  if (submitted && options_.planner != nullptr && r.stats.wan_s > 0) {
    (void)options_.planner->SetCommTime(r.stats.wan_s);
  }
  r.pushes.clear();
  PruneLocked();
}

void RoundEngine::PruneLocked() {
  size_t resolved = 0;
  for (const auto& [id, r] : rounds_) resolved += r.state == State::kResolved;
  for (auto it = rounds_.begin(); resolved > options_.policy.keep_rounds && it != rounds_.end();) {
    if (it->second.state == State::kResolved) {
      it = rounds_.erase(it);
      --resolved;
    } else {
      ++it;
    }
  }
}

WorkerOutcome RoundEngine::OutcomeFor(const Round& r, uint32_t sender_id) const {
  WorkerOutcome o{.round_id = r.id, .kind = r.kind, .reason = r.reason, .aggregate = r.aggregate};
  o.included = r.kind == RoundOutcome::Kind::kPublished && r.region_in_aggregate &&
               r.included.count(sender_id) > 0;
  if (o.included) return o;
  o.retained = r.region_retained && r.included.count(sender_id) > 0;
  if (o.retained) {
    o.exclusion = absl::StrFormat(
        "round %u %s without region %u; the gateway keeps the region's update (this push in it) "
        "in its error-feedback residual for a later round, so the worker keeps its residual as "
        "it is",
        r.id, r.kind == RoundOutcome::Kind::kAborted ? "was aborted" : "was published",
        options_.region_id);
    if (r.kind == RoundOutcome::Kind::kAborted) {
      o.exclusion += absl::StrFormat(" (%s)", r.reason.message());
    }
    return o;
  }
  if (r.kind == RoundOutcome::Kind::kAborted) {
    o.exclusion = absl::StrFormat("round %u was aborted: %s", r.id, r.reason.message());
  } else if (auto it = r.exclusion.find(sender_id); it != r.exclusion.end()) {
    o.exclusion = it->second;
  } else if (r.pushed.count(sender_id)) {
    o.exclusion =
        absl::StrFormat("round %u was published before region %u closed it (without this region)",
                        r.id, options_.region_id);
  } else if (!r.expected.count(sender_id)) {
    o.exclusion = absl::StrFormat("not in round %u (joined after it opened)", r.id);
  } else {
    o.exclusion = absl::StrFormat("no push from this worker in round %u", r.id);
  }
  return o;
}

absl::StatusOr<WorkerOutcome> RoundEngine::Pull(uint32_t sender_id, uint64_t round_id,
                                                absl::Time deadline,
                                                std::function<bool()> cancelled) {
  absl::MutexLock l(&mu_);
  auto mit = members_.find(sender_id);
  if (mit == members_.end()) {
    Count("not_member");
    return absl::NotFoundError(absl::StrFormat(
        "sender id %u has not joined region %u; call Join first", sender_id, options_.region_id));
  }
  Member& m = mit->second;
  m.last_seen = options_.now();
  if (round_id > collecting_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pull of round %u: round %u has not begun; the relay collects round %u",
                        round_id, round_id, collecting_));
  }
  if (!rounds_.count(round_id)) {
    uint64_t oldest = rounds_.empty() ? collecting_ : rounds_.begin()->first;
    return absl::OutOfRangeError(
        absl::StrFormat("pull of round %u: the relay no longer holds it (it keeps rounds %u..%u; "
                        "round.keep_rounds %u)",
                        round_id, oldest, collecting_, options_.policy.keep_rounds));
  }
  ++m.active_calls;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = rounds_.find(round_id);
    return stopping_ || it == rounds_.end() || it->second.state == State::kResolved;
  };
  for (;;) {
    absl::Time step = std::min(deadline, absl::Now() + absl::Milliseconds(100));
    if (mu_.AwaitWithDeadline(absl::Condition(&done), step)) break;
    if (absl::Now() >= deadline || (cancelled && cancelled())) break;
  }
  --m.active_calls;
  m.last_seen = options_.now();
  auto it = rounds_.find(round_id);
  if (stopping_) return absl::UnavailableError("the relay is shutting down");
  if (it == rounds_.end()) {
    return absl::OutOfRangeError(absl::StrFormat("pull of round %u: no longer held", round_id));
  }
  const Round& r = it->second;
  if (r.state != State::kResolved) {
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrFormat("pull of round %u cancelled", round_id));
    }
    return absl::DeadlineExceededError(absl::StrFormat(
        "pull of round %u: the round has not ended by the pull deadline (%s; %u of %u expected "
        "workers pushed)",
        round_id, StateName(static_cast<int>(r.state)), r.pushes.size(), r.expected.size()));
  }
  return OutcomeFor(r, sender_id);
}

absl::Status RoundEngine::Report(uint32_t sender_id, const planner::WorkerReport& report) {
  absl::MutexLock l(&mu_);
  HEDDLE_RETURN_IF_ERROR(MemberCheckLocked(sender_id));
  Member& m = members_[sender_id];
  m.last_seen = options_.now();
  if (options_.planner == nullptr || !m.planned) return absl::OkStatus();
  planner::WorkerReport r = report;
  r.worker_id = m.name;
  absl::StatusOr<planner::ReportResult> res = options_.planner->Report(r);
  if (!res.ok()) {
    return absl::Status(res.status().code(),
                        absl::StrFormat("report of round %u from worker \"%s\": %s", report.round,
                                        m.name, res.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<planner::Plan> RoundEngine::CurrentPlan() const {
  if (options_.planner == nullptr) {
    return absl::FailedPreconditionError("this relay has no planner");
  }
  return options_.planner->CurrentPlan();
}

absl::StatusOr<std::string> RoundEngine::WorkerName(uint32_t sender_id) const {
  absl::MutexLock l(&mu_);
  auto it = members_.find(sender_id);
  if (it == members_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("sender id %u has not joined region %u", sender_id, options_.region_id));
  }
  return it->second.name;
}

void RoundEngine::AddBytesOut(uint64_t round_id, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  bytes_out_total_ += bytes;
  auto it = rounds_.find(round_id);
  if (it != rounds_.end()) it->second.stats.bytes_out += bytes;
}

void RoundEngine::Tick() {
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.now();
  for (auto& [id, m] : members_) {
    if (m.member && m.active_calls == 0 && now - m.last_seen > options_.policy.liveness_timeout) {
      RemoveMemberLocked(m, absl::StrFormat("dropped: no call for %s (round.liveness_timeout)",
                                            absl::FormatDuration(now - m.last_seen)));
    }
  }
  MaybeCloseLocked(now >= Collecting().deadline);
}

uint64_t RoundEngine::collecting_round() const {
  absl::MutexLock l(&mu_);
  return collecting_;
}

bool RoundEngine::WaitResolved(uint64_t round_id, absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return last_resolved_ >= round_id; };
  return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
}

EngineStatus RoundEngine::Status() const {
  absl::MutexLock l(&mu_);
  const absl::Time now = options_.now();
  EngineStatus s{.region_id = options_.region_id,
                 .collecting_round = collecting_,
                 .last_resolved_round = last_resolved_,
                 .rounds_published = rounds_published_,
                 .rounds_aborted = rounds_aborted_,
                 .refused = refused_,
                 .bytes_in_total = bytes_in_total_,
                 .bytes_out_total = bytes_out_total_};
  for (const auto& [id, m] : members_) {
    s.members.push_back({.name = m.name,
                         .sender_id = id,
                         .member = m.member,
                         .left_reason = m.left_reason,
                         .idle_s = m.active_calls > 0 ? 0.0 : Seconds(now - m.last_seen),
                         .last_pushed_round = m.last_pushed_round,
                         .last_tokens = m.last_tokens,
                         .rounds_included = m.rounds_included,
                         .rounds_excluded = m.rounds_excluded});
  }
  for (const auto& [id, r] : rounds_) {
    RoundStats st = r.stats;
    if (r.state != State::kResolved) {
      st.state = StateName(static_cast<int>(r.state));
      st.expected = r.expected.size();
      if (r.state == State::kOpen || r.state == State::kCollecting) st.pushed = r.pushes.size();
      if (r.state == State::kOpen) st.wait_s = Seconds(now - r.opened_at);
    }
    // Points in time on the engine's clock, for lining rounds up across gateways.
    auto at = [](absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); };
    st.opened_at_s = at(r.opened_at);
    st.closed_at_s = at(r.closed_at);
    st.finished_at_s = at(r.finished_at);
    st.resolved_at_s = at(r.resolved_at);
    s.rounds.push_back(std::move(st));
  }
  return s;
}

}  // namespace heddle::relay
