#include "tools/heddle-relay/config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace heddle::relay::tool {
namespace {

absl::Status Unknown(const YAML::Node& map, const char* where, std::set<std::string> known) {
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    if (!known.count(k)) {
      std::string list;
      for (const std::string& s : known) list += (list.empty() ? "" : ", ") + s;
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: unknown key \"%s\" (known: %s)", where, k, list));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Get(const YAML::Node& map, const char* key, const char* where, T* out) {
  const YAML::Node n = map[key];
  if (!n) return absl::OkStatus();
  try {
    *out = n.as<T>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.%s: \"%s\" is not a valid value", where, key, YAML::Dump(n)));
  }
  return absl::OkStatus();
}

std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return base + "/" + p;
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("token_file %s: cannot open", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return absl::InvalidArgumentError(absl::StrFormat("token_file %s: empty", path));
  return t;
}

absl::StatusOr<RelayConfig> Parse(const YAML::Node& root, const std::string& base) {
  if (!root.IsMap()) return absl::InvalidArgumentError("relay config: expected a mapping");
  HEDDLE_RETURN_IF_ERROR(Unknown(root, "relay config",
                                 {"region", "listen", "token", "token_file", "tls", "model",
                                  "round", "planner", "metrics", "wan"}));
  RelayConfig c;
  const YAML::Node region = root["region"];
  if (!region || !region.IsMap()) {
    return absl::InvalidArgumentError(
        "relay config: region: required, e.g. `region: {id: 1, name: eu-west}` (ids are unique "
        "across gateways; the lowest id coordinates)");
  }
  HEDDLE_RETURN_IF_ERROR(Unknown(region, "region", {"id", "name"}));
  HEDDLE_RETURN_IF_ERROR(Get(region, "id", "region", &c.region_id));
  HEDDLE_RETURN_IF_ERROR(Get(region, "name", "region", &c.region));
  if (c.region_id == 0) {
    return absl::InvalidArgumentError("region.id: required, 1..2^32-1");
  }
  if (c.region.empty()) c.region = absl::StrFormat("region-%u", c.region_id);
  c.server.service.region = c.region;
  HEDDLE_RETURN_IF_ERROR(Get(root, "listen", "relay config", &c.server.listen));
  std::string token, token_file;
  HEDDLE_RETURN_IF_ERROR(Get(root, "token", "relay config", &token));
  HEDDLE_RETURN_IF_ERROR(Get(root, "token_file", "relay config", &token_file));
  if (!token.empty() && !token_file.empty()) {
    return absl::InvalidArgumentError("token and token_file: give one of them, not both");
  }
  if (!token_file.empty()) {
    HEDDLE_ASSIGN_OR_RETURN(token, ReadToken(Resolve(base, token_file)));
  }
  c.server.service.token = token;
  if (const YAML::Node tls = root["tls"]; tls) {
    HEDDLE_RETURN_IF_ERROR(Unknown(tls, "tls", {"cert", "key", "client_ca"}));
    HEDDLE_RETURN_IF_ERROR(Get(tls, "cert", "tls", &c.server.tls_cert_file));
    HEDDLE_RETURN_IF_ERROR(Get(tls, "key", "tls", &c.server.tls_key_file));
    HEDDLE_RETURN_IF_ERROR(Get(tls, "client_ca", "tls", &c.server.tls_client_ca_file));
    c.server.tls_cert_file = Resolve(base, c.server.tls_cert_file);
    c.server.tls_key_file = Resolve(base, c.server.tls_key_file);
    c.server.tls_client_ca_file = Resolve(base, c.server.tls_client_ca_file);
  }
  const YAML::Node model = root["model"];
  if (!model) {
    return absl::InvalidArgumentError(
        "model: required: the tensors every worker pushes (e.g. `model: {synthetic: {tensors: 1, "
        "elements: 1000000}}`, docs/relay.md §7)");
  }
  if (model.IsScalar()) {
    HEDDLE_ASSIGN_OR_RETURN(c.spec, ModelSpecFromFile(Resolve(base, model.as<std::string>())));
  } else {
    HEDDLE_ASSIGN_OR_RETURN(c.spec, ModelSpecFromString(YAML::Dump(model)));
  }
  if (const YAML::Node r = root["round"]; r) {
    HEDDLE_RETURN_IF_ERROR(
        Unknown(r, "round",
                {"push_timeout_s", "missing", "min_token_fraction", "weighting",
                 "liveness_timeout_s", "keep_rounds", "max_workers", "min_workers"}));
    double push = absl::ToDoubleSeconds(c.policy.push_timeout);
    double live = absl::ToDoubleSeconds(c.policy.liveness_timeout);
    std::string missing = MissingPolicyName(c.policy.missing);
    std::string weighting = WeightingName(c.policy.weighting);
    HEDDLE_RETURN_IF_ERROR(Get(r, "push_timeout_s", "round", &push));
    HEDDLE_RETURN_IF_ERROR(Get(r, "liveness_timeout_s", "round", &live));
    HEDDLE_RETURN_IF_ERROR(Get(r, "missing", "round", &missing));
    HEDDLE_RETURN_IF_ERROR(Get(r, "weighting", "round", &weighting));
    HEDDLE_RETURN_IF_ERROR(Get(r, "min_token_fraction", "round", &c.policy.min_token_fraction));
    HEDDLE_RETURN_IF_ERROR(Get(r, "keep_rounds", "round", &c.policy.keep_rounds));
    HEDDLE_RETURN_IF_ERROR(Get(r, "max_workers", "round", &c.policy.max_workers));
    HEDDLE_RETURN_IF_ERROR(Get(r, "min_workers", "round", &c.policy.min_workers));
    c.policy.push_timeout = absl::Seconds(push);
    c.policy.liveness_timeout = absl::Seconds(live);
    absl::StatusOr<MissingPolicy> mp = ParseMissingPolicy(missing);
    if (!mp.ok()) return absl::InvalidArgumentError(absl::StrCat("round.", mp.status().message()));
    c.policy.missing = *mp;
    if (weighting == "fednova") {
      c.policy.weighting = Weighting::kFedNova;
    } else if (weighting == "tokens") {
      c.policy.weighting = Weighting::kTokens;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "round.weighting \"%s\": expected fednova (default) or tokens", weighting));
    }
  }
  HEDDLE_RETURN_IF_ERROR(ValidateRoundPolicy(c.policy));
  if (const YAML::Node p = root["planner"]; p) {
    HEDDLE_RETURN_IF_ERROR(Unknown(
        p, "planner",
        {"mode", "target_round_s", "min_inner_steps", "max_inner_steps", "batch_granularity",
         "min_batch", "seq_len", "tokens_per_round", "comm_overlaps", "deadline_sigmas"}));
    planner::PlannerConfig pc;
    std::string mode(planner::PlanModeName(pc.mode));
    HEDDLE_RETURN_IF_ERROR(Get(p, "mode", "planner", &mode));
    absl::StatusOr<planner::PlanMode> pm = planner::ParsePlanMode(mode);
    if (!pm.ok())
      return absl::InvalidArgumentError(absl::StrCat("planner.", pm.status().message()));
    pc.mode = *pm;
    HEDDLE_RETURN_IF_ERROR(Get(p, "target_round_s", "planner", &pc.solver.target_round_s));
    HEDDLE_RETURN_IF_ERROR(Get(p, "min_inner_steps", "planner", &pc.solver.min_inner_steps));
    HEDDLE_RETURN_IF_ERROR(Get(p, "max_inner_steps", "planner", &pc.solver.max_inner_steps));
    HEDDLE_RETURN_IF_ERROR(Get(p, "batch_granularity", "planner", &pc.solver.batch_granularity));
    HEDDLE_RETURN_IF_ERROR(Get(p, "min_batch", "planner", &pc.solver.min_batch));
    HEDDLE_RETURN_IF_ERROR(Get(p, "seq_len", "planner", &pc.solver.seq_len));
    HEDDLE_RETURN_IF_ERROR(Get(p, "tokens_per_round", "planner", &pc.solver.tokens_per_round));
    HEDDLE_RETURN_IF_ERROR(Get(p, "comm_overlaps", "planner", &pc.solver.comm_overlaps));
    HEDDLE_RETURN_IF_ERROR(Get(p, "deadline_sigmas", "planner", &pc.deadline_sigmas));
    absl::Status v = planner::ValidatePlannerConfig(pc);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("planner: ", v.message()));
    c.planner = pc;
  }
  if (const YAML::Node m = root["metrics"]; m) {
    HEDDLE_RETURN_IF_ERROR(Unknown(m, "metrics", {"listen"}));
    HEDDLE_RETURN_IF_ERROR(Get(m, "listen", "metrics", &c.metrics_listen));
  }
  if (const YAML::Node w = root["wan"]; w) c.wan_yaml = YAML::Dump(w);
  return c;
}

}  // namespace

absl::StatusOr<RelayConfig> RelayConfigFromString(const std::string& yaml,
                                                  const std::string& base_dir) {
  try {
    return Parse(YAML::Load(yaml), base_dir);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("relay config: %s", e.what()));
  }
}

absl::StatusOr<RelayConfig> RelayConfigFromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat(
        "relay config %s: cannot open (an example: deploy/examples/relay/region.yaml)", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string base = ".";
  if (size_t slash = path.rfind('/'); slash != std::string::npos) base = path.substr(0, slash);
  absl::StatusOr<RelayConfig> c = RelayConfigFromString(ss.str(), base);
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrFormat("%s: %s", path, c.status().message()));
  }
  return c;
}

}  // namespace heddle::relay::tool
