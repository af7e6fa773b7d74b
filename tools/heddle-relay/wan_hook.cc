#include "tools/heddle-relay/wan_hook.h"

#include <mutex>

#include "dataplane/relay/round/testing/fake_exchange.h"

namespace heddle::relay::tool {
namespace {

std::mutex& FactoryMu() {
  static std::mutex mu;
  return mu;
}
WanExchangeFactory& Factory() {
  static WanExchangeFactory f;
  return f;
}

}  // namespace

void SetWanExchangeFactory(WanExchangeFactory factory) {
  std::lock_guard<std::mutex> l(FactoryMu());
  Factory() = std::move(factory);
}

WanExchangeFactory GetWanExchangeFactory() {
  std::lock_guard<std::mutex> l(FactoryMu());
  if (Factory()) return Factory();
  return DefaultWanExchange;
}

absl::StatusOr<std::unique_ptr<WanExchange>> DefaultWanExchange(const WanContext& ctx) {
  if (!ctx.wan_yaml.empty()) {
    return absl::InvalidArgumentError(
        "wan: this heddle-relay has no WAN exchange installed, so a `wan:` block cannot be "
        "honoured; remove it to run a single region");
  }
  // The single-region in-process exchange. NewLocalExchange() (wan/exchange.h) replaces it when
  // the WAN side is linked in.
  return std::unique_ptr<WanExchange>(std::make_unique<testing::FakeExchange>(
      *ctx.spec, testing::FakeExchangeOptions{
                     .region_id = ctx.region_id, .weighting = ctx.weighting, .keep_rounds = 16}));
}

}  // namespace heddle::relay::tool
