#include "tools/heddle-relay/wan_hook.h"

#include <mutex>

#include "absl/strings/str_format.h"
#include "dataplane/relay/wan/grpc_exchange.h"
#include "yaml-cpp/yaml.h"

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
  if (ctx.wan_yaml.empty()) {
    // One region, no peers: the region's own re-compressed frames are the global aggregate.
    return NewLocalExchange(
        *ctx.spec, LocalExchangeOptions{
                       .region_id = ctx.region_id, .weighting = ctx.weighting, .keep_rounds = 16});
  }
  YAML::Node node;
  try {
    node = YAML::Load(ctx.wan_yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("wan: %s", e.what()));
  }
  absl::StatusOr<WanOptions> opts = WanOptionsFromYaml(node, ctx.config_dir);
  if (!opts.ok()) return opts.status();
  if (opts->region_id != ctx.region_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("wan.region: %u, but region.id is %u; they must be the same region",
                        opts->region_id, ctx.region_id));
  }
  if (!node["weighting"]) opts->weighting = ctx.weighting;  // one setting for both levels
  if (opts->weighting != ctx.weighting) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "wan.weighting: %s, but round.weighting is %s; use one weighting for both levels",
        WeightingName(opts->weighting), WeightingName(ctx.weighting)));
  }
  // Relative file names in the block are relative to the config file.
  auto resolve = [&ctx](std::string& path) {
    if (!path.empty() && path[0] != '/' && !ctx.config_dir.empty()) {
      path = ctx.config_dir + "/" + path;
    }
  };
  resolve(opts->tls.cert_file);
  resolve(opts->tls.key_file);
  resolve(opts->tls.ca_file);
  resolve(opts->schedule.file);
  resolve(opts->schedule.topology_file);
  resolve(opts->state_dir);
  return NewGrpcExchange(*ctx.spec, *opts);
}

}  // namespace heddle::relay::tool
