#include "dataplane/relay/round/testing/fake_exchange.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace heddle::relay::testing {

absl::Status FakeAccumulateSlice(const GlobalAggregate& g, uint32_t slice, std::span<float> out) {
  if (slice >= g.slices) return absl::OutOfRangeError(absl::StrFormat("slice %u", slice));
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t p = 0; p < g.parts.size(); ++p) {
    const auto& bytes = g.frames[p * g.slices + slice];
    absl::StatusOr<FrameView> f = ParseFrame(*bytes);
    if (!f.ok()) return f.status();
    if (!AccumulateFrame(*f, g.parts[p].weight, out)) {
      return absl::InvalidArgumentError("output shorter than the slice");
    }
  }
  return absl::OkStatus();
}

uint64_t FakeDigest(const GlobalAggregate& g) {
  uint32_t crc = 0;
  for (const RegionPart& p : g.parts) {
    uint8_t b[8];
    std::memcpy(b, &p.weight, 8);
    crc = Crc32c(b, crc);
  }
  // Each frame's own CRC-32C trailer binds its content (a CRC chained over whole frames would
  // not: see slice_digest.h).
  for (const auto& f : g.frames) {
    if (f->size() >= 4) crc = Crc32c(std::span<const uint8_t>(f->data() + f->size() - 4, 4), crc);
  }
  return (g.round_id << 32) ^ crc;
}

FakeExchange::FakeExchange(const ModelSpec& spec, const FakeExchangeOptions& options)
    : spec_(spec), slices_(Slices(spec)), options_(options) {
  for (const SliceRef& s : slices_) {
    encoders_.push_back(*SignEncoder::Create(s.count, {.chunk_size = spec.chunk_size}));
  }
}

absl::Status FakeExchange::SubmitSlice(uint64_t round_id, const SliceRef& s,
                                       std::span<const float> region_aggregate) {
  absl::MutexLock l(&mu_);
  if (s.index >= slices_.size() || region_aggregate.size() != s.count) {
    return absl::InvalidArgumentError(absl::StrFormat("slice %u: bad shape", s.index));
  }
  if (encoders_[s.index].Encode(DType::kFloat32, region_aggregate.data()) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("slice %u: not finite", s.index));
  }
  std::vector<float>& kept = pending_[round_id].slices[s.index];
  if (options_.keep_submitted) kept.assign(region_aggregate.begin(), region_aggregate.end());
  return absl::OkStatus();
}

std::shared_ptr<const GlobalAggregate> FakeExchange::Build(const Pending& p) {
  auto g = std::make_shared<GlobalAggregate>();
  g->round_id = p.summary.round_id;
  g->weighting = options_.weighting;
  g->slices = slices_.size();
  if (p.summary.tokens > 0) {
    g->parts.push_back({.region_id = options_.region_id,
                        .tokens = p.summary.tokens,
                        .tau_eff = p.summary.tau_eff,
                        .weight = 1.0});
    for (const SliceRef& s : slices_) {
      FrameHeader h = SliceHeader(spec_, s, p.summary.round_id, options_.region_id);
      h.token_count = p.summary.tokens;
      h.inner_steps = 1;
      auto buf = std::make_shared<std::vector<uint8_t>>(encoders_[s.index].FrameBytes());
      absl::Status st = encoders_[s.index].WriteFrame(h, *buf);
      if (!st.ok()) return nullptr;
      g->frames.push_back(std::move(buf));
    }
  }
  g->digest = FakeDigest(*g);
  return g;
}

absl::Status FakeExchange::FinishRegion(const RegionSummary& summary) {
  uint64_t r = summary.round_id;
  std::shared_ptr<const GlobalAggregate> g;
  {
    absl::MutexLock l(&mu_);
    Pending& p = pending_[r];
    p.summary = summary;
    last_summary_ = summary;
    if (summary.tokens > 0 && p.slices.size() != slices_.size()) {
      return absl::FailedPreconditionError(absl::StrFormat("round %u: %u of %u slices submitted", r,
                                                           p.slices.size(), slices_.size()));
    }
    history_[r] = p;
    if (history_.size() > 8) history_.erase(history_.begin());
    if (!auto_publish_) return absl::OkStatus();
    g = Build(p);
    pending_.erase(r);
    published_[r] = g;
  }
  Deliver(r, {.kind = RoundOutcome::Kind::kPublished,
              .aggregate = g,
              .includes_this_region = summary.tokens > 0});
  return absl::OkStatus();
}

void FakeExchange::set_auto_publish(bool on) {
  absl::MutexLock l(&mu_);
  auto_publish_ = on;
}

absl::Status FakeExchange::Release(uint64_t round_id) {
  std::shared_ptr<const GlobalAggregate> g;
  bool includes = false;
  {
    absl::MutexLock l(&mu_);
    auto it = pending_.find(round_id);
    if (it == pending_.end()) return absl::NotFoundError("no such pending round");
    g = Build(it->second);
    includes = it->second.summary.tokens > 0;
    pending_.erase(it);
    published_[round_id] = g;
  }
  Deliver(
      round_id,
      {.kind = RoundOutcome::Kind::kPublished, .aggregate = g, .includes_this_region = includes});
  return absl::OkStatus();
}

void FakeExchange::PublishWithoutRegion(uint64_t round_id) {
  auto g = std::make_shared<GlobalAggregate>();
  g->round_id = round_id;
  g->slices = slices_.size();
  g->digest = FakeDigest(*g);
  {
    absl::MutexLock l(&mu_);
    pending_.erase(round_id);
    published_[round_id] = g;
  }
  Deliver(round_id, {.kind = RoundOutcome::Kind::kPublished, .aggregate = g});
}

void FakeExchange::Abort(uint64_t round_id, absl::Status reason) {
  {
    absl::MutexLock l(&mu_);
    pending_.erase(round_id);
  }
  Deliver(round_id, {.kind = RoundOutcome::Kind::kAborted, .reason = std::move(reason)});
}

void FakeExchange::Deliver(uint64_t round_id, RoundOutcome outcome) {
  absl::MutexLock d(&deliver_mu_);
  OutcomeCallback cb;
  {
    absl::MutexLock l(&mu_);
    while (published_.size() > options_.keep_rounds) published_.erase(published_.begin());
    cb = cb_;
  }
  if (cb) cb(round_id, std::move(outcome));
}

void FakeExchange::SetOutcomeCallback(OutcomeCallback cb) {
  absl::MutexLock d(&deliver_mu_);
  absl::MutexLock l(&mu_);
  cb_ = std::move(cb);
}

absl::StatusOr<std::shared_ptr<const GlobalAggregate>> FakeExchange::Published(
    uint64_t round_id) const {
  absl::MutexLock l(&mu_);
  auto it = published_.find(round_id);
  if (it == published_.end()) return absl::NotFoundError("round not held");
  return it->second;
}

RegionSummary FakeExchange::last_summary() const {
  absl::MutexLock l(&mu_);
  return last_summary_;
}

uint32_t FakeExchange::slices_submitted(uint64_t round_id) const {
  absl::MutexLock l(&mu_);
  auto it = history_.find(round_id);
  if (it != history_.end()) return it->second.slices.size();
  auto p = pending_.find(round_id);
  return p == pending_.end() ? 0 : p->second.slices.size();
}

std::vector<float> FakeExchange::submitted(uint64_t round_id, uint32_t slice) const {
  absl::MutexLock l(&mu_);
  auto it = history_.find(round_id);
  if (it == history_.end()) return {};
  auto s = it->second.slices.find(slice);
  return s == it->second.slices.end() ? std::vector<float>{} : s->second;
}

}  // namespace heddle::relay::testing
