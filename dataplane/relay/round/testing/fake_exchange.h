// File: dataplane/relay/round/testing/fake_exchange.h
//
// A test-only WanExchange for one region and no peers, so the round engine, the service and the
// clients can be tested without the WAN side: each submitted slice is re-encoded at once with a
// per-slice error-feedback SignEncoder (fp32 input, as a gateway does), the frames are written at
// FinishRegion() with the region's tokens, and the round is published with weight 1 — or held,
// published without the region, or aborted when a test says so.
//
//   auto ex = std::make_unique<testing::FakeExchange>(spec, {.region_id = 1});
//   FakeExchange* fake = ex.get();
//   fake->set_auto_publish(false);           // rounds wait for fake->Release(r)
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/wan/exchange.h"

namespace heddle::relay::testing {

// Σ_p W_p · decode(frame p of slice s) from +0.0f in part order: the GlobalAggregate's reading.
absl::Status FakeAccumulateSlice(const GlobalAggregate& g, uint32_t slice, std::span<float> out);
// CRC-32C over the weights and every frame, in order.
uint64_t FakeDigest(const GlobalAggregate& g);

struct FakeExchangeOptions {
  uint32_t region_id = 1;
  Weighting weighting = Weighting::kFedNova;
  uint32_t keep_rounds = 4;
  // Keep a copy of every submitted fp32 slice for submitted() (tests of small models only).
  bool keep_submitted = false;
};

class FakeExchange : public WanExchange {
 public:
  FakeExchange(const ModelSpec& spec, const FakeExchangeOptions& options);

  absl::Status SubmitSlice(uint64_t round_id, const SliceRef& s,
                           std::span<const float> region_aggregate) override;
  absl::Status FinishRegion(const RegionSummary& summary) override;
  void SetOutcomeCallback(OutcomeCallback cb) override;
  absl::StatusOr<std::shared_ptr<const GlobalAggregate>> Published(
      uint64_t round_id) const override;

  // Off: FinishRegion() only records; Release(r) publishes r (as it would have).
  void set_auto_publish(bool on);
  absl::Status Release(uint64_t round_id);
  // Delivers outcomes as other gateways would decide them: r published without this region (an
  // empty aggregate), or aborted everywhere.
  void PublishWithoutRegion(uint64_t round_id);
  void Abort(uint64_t round_id, absl::Status reason);

  // What the region submitted (for tests): the last FinishRegion() and per round the slices.
  RegionSummary last_summary() const;
  uint32_t slices_submitted(uint64_t round_id) const;
  // The region aggregate of slice s in round r, as submitted (with keep_submitted).
  std::vector<float> submitted(uint64_t round_id, uint32_t slice) const;

 private:
  struct Pending {
    RegionSummary summary;
    std::map<uint32_t, std::vector<float>> slices;
  };
  std::shared_ptr<const GlobalAggregate> Build(const Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(uint64_t round_id, RoundOutcome outcome) ABSL_LOCKS_EXCLUDED(mu_);

  const ModelSpec spec_;
  const std::vector<SliceRef> slices_;
  const FakeExchangeOptions options_;
  mutable absl::Mutex mu_;
  std::vector<SignEncoder> encoders_ ABSL_GUARDED_BY(mu_);
  bool auto_publish_ ABSL_GUARDED_BY(mu_) = true;
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Pending> history_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<const GlobalAggregate>> published_ ABSL_GUARDED_BY(mu_);
  RegionSummary last_summary_ ABSL_GUARDED_BY(mu_);
  OutcomeCallback cb_ ABSL_GUARDED_BY(mu_);
  // Outcomes go out one at a time, in order, outside mu_.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace heddle::relay::testing
