// File: tools/heddle-relay/wan_hook.h
//
// Where `heddle-relay serve` gets its WAN half (dataplane/relay/wan/exchange.h). The region side
// only knows the WanExchange interface; the WAN side installs a factory that reads the config's
// `wan:` block (passed through as YAML text) and builds its exchange:
//
//   SetWanExchangeFactory([](const WanContext& c) { return NewGrpcExchange(c...); });
//
// Without one, serve runs a single region with no peers (DefaultWanExchange), and a `wan:` block
// in the config is refused rather than silently ignored.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dataplane/relay/wan/exchange.h"

namespace heddle::relay::tool {

struct WanContext {
  uint32_t region_id = 0;
  std::string region;
  const ModelSpec* spec = nullptr;
  Weighting weighting = Weighting::kFedNova;
  std::string wan_yaml;    // the config's `wan:` block, "" when absent
  std::string config_dir;  // relative paths in the block are relative to this
};

using WanExchangeFactory =
    std::function<absl::StatusOr<std::unique_ptr<WanExchange>>(const WanContext&)>;

void SetWanExchangeFactory(WanExchangeFactory factory);
// The installed factory, or DefaultWanExchange.
WanExchangeFactory GetWanExchangeFactory();

// One region, no peers: each round publishes the region's own re-compressed frames.
absl::StatusOr<std::unique_ptr<WanExchange>> DefaultWanExchange(const WanContext& ctx);

}  // namespace heddle::relay::tool
