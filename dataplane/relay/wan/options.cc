// WanOptionsFromYaml(): the relay config's `wan:` block (grpc_exchange.h).
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "dataplane/relay/wan/grpc_exchange.h"
#include "dataplane/relay/wan/schedule_plan.h"

namespace heddle::relay {
namespace {

absl::Status Bad(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("wan.%s: %s", key, what));
}

absl::StatusOr<std::string> Str(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected a string");
  return n.as<std::string>();
}

absl::StatusOr<uint64_t> U64(const YAML::Node& n, const std::string& key, uint64_t max) {
  if (!n.IsScalar()) return Bad(key, "expected a non-negative integer");
  const std::string s = n.as<std::string>();
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v > max) {
    return Bad(key, absl::StrFormat("\"%s\" is not an integer from 0 to %u", s, max));
  }
  return v;
}

absl::StatusOr<double> Double(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected a number");
  const std::string s = n.as<std::string>();
  double v = 0;
  if (!absl::SimpleAtod(s, &v)) return Bad(key, absl::StrFormat("\"%s\" is not a number", s));
  return v;
}

// "30s", "500ms", "2m" (absl::ParseDuration), or a plain number of seconds.
absl::StatusOr<absl::Duration> Duration(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected a duration such as 30s or 500ms");
  const std::string s = n.as<std::string>();
  absl::Duration d;
  double secs = 0;
  if (absl::SimpleAtod(s, &secs)) {
    d = absl::Seconds(secs);
  } else if (!absl::ParseDuration(s, &d)) {
    return Bad(key, absl::StrFormat("\"%s\" is not a duration (e.g. 30s, 500ms, or seconds)", s));
  }
  if (d <= absl::ZeroDuration()) return Bad(key, absl::StrFormat("\"%s\" must be positive", s));
  return d;
}

absl::StatusOr<bool> Bool(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) return Bad(key, "expected true or false");
  const std::string s = absl::AsciiStrToLower(n.as<std::string>());
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  return Bad(key, absl::StrFormat("\"%s\" is not true or false", s));
}

absl::Status UnknownKeys(const YAML::Node& n, const std::string& where,
                         const std::set<std::string>& known) {
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (!known.contains(k)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s%s: unknown key", where, k));
    }
  }
  return absl::OkStatus();
}

// `schedule: NAME` or `schedule: {name: NAME, pieces: P, params: {k: v}}` or `{file: PATH}`.
absl::Status ScheduleFromNode(const YAML::Node& s, WanScheduleOptions& o) {
  if (s.IsScalar()) {
    HEDDLE_ASSIGN_OR_RETURN(o.name, Str(s, "schedule"));
  } else if (s.IsMap()) {
    HEDDLE_RETURN_IF_ERROR(UnknownKeys(
        s, "wan.schedule.", {"name", "file", "pieces", "params", "measured", "recompile_every"}));
    if (s["name"] && s["file"]) return Bad("schedule", "give name or file, not both");
    if (s["file"]) {
      o.name = "file";
      HEDDLE_ASSIGN_OR_RETURN(o.file, Str(s["file"], "schedule.file"));
      if (o.file.empty()) return Bad("schedule.file", "empty (a schedule JSON file)");
    }
    if (s["name"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.name, Str(s["name"], "schedule.name"));
    }
    if (s["pieces"]) {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(s["pieces"], "schedule.pieces", kMaxRelayPieces));
      o.pieces = static_cast<uint32_t>(v);
    }
    if (s["measured"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.measured, Bool(s["measured"], "schedule.measured"));
    }
    if (s["recompile_every"]) {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t v,
                              U64(s["recompile_every"], "schedule.recompile_every", 1u << 20));
      if (v < 1) return Bad("schedule.recompile_every", "must be at least 1 (rounds)");
      o.recompile_every = static_cast<uint32_t>(v);
    }
    if (const YAML::Node p = s["params"]) {
      if (!p.IsMap()) return Bad("schedule.params", "expected {name: integer, ...}");
      for (const auto& kv : p) {
        const std::string k = kv.first.as<std::string>();
        const std::string key = "schedule.params." + k;
        if (!kv.second.IsScalar()) return Bad(key, "expected an integer");
        int64_t v = 0;
        if (!absl::SimpleAtoi(kv.second.as<std::string>(), &v)) {
          return Bad(key, absl::StrFormat("\"%s\" is not an integer", kv.second.as<std::string>()));
        }
        o.params[k] = v;
      }
    }
  } else {
    return Bad("schedule", "expected direct, ring, auto, a builtin's name, or {name|file, ...}");
  }
  if (o.name.empty()) return Bad("schedule", "empty name (direct, ring, auto, ...)");
  if (o.measured && o.name != "auto") {
    return Bad("schedule.measured", "recompiling from measured speeds needs name: auto");
  }
  if (o.name == "file" && o.file.empty()) {
    return Bad("schedule", "name 'file' needs {file: schedule.json}");
  }
  return absl::OkStatus();
}

// A token file's content, surrounding whitespace stripped; empty or unreadable is an error.
// A relative name is relative to `config_dir` (the config file's directory), like the TLS
// files and state_dir, not to the working directory.
absl::StatusOr<std::string> ReadTokenFile(const YAML::Node& n, const std::string& key,
                                          const std::string& config_dir) {
  HEDDLE_ASSIGN_OR_RETURN(std::string path, Str(n, key));
  if (!path.empty() && path[0] != '/' && !config_dir.empty()) path = config_dir + "/" + path;
  std::ifstream in(path);
  if (!in) return Bad(key, absl::StrFormat("cannot read %s", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) return Bad(key, absl::StrFormat("%s is empty", path));
  return token;
}

absl::StatusOr<WanOptions> FromNode(const YAML::Node& wan, const std::string& config_dir) {
  if (!wan.IsMap()) return absl::InvalidArgumentError("wan: expected a mapping");
  HEDDLE_RETURN_IF_ERROR(UnknownKeys(
      wan, "wan.",
      {"region", "listen", "peers", "streams_per_peer", "wan_timeout", "quorum", "token",
       "token_file", "tls", "chunk_bytes", "keep_rounds", "weighting", "gateway_error_feedback",
       "rpc_timeout", "push_timeout", "coordinator", "schedule", "topology", "state_dir"}));
  WanOptions o;
  if (!wan["region"]) return Bad("region", "missing (this gateway's region id)");
  HEDDLE_ASSIGN_OR_RETURN(uint64_t region,
                          U64(wan["region"], "region", std::numeric_limits<uint32_t>::max()));
  o.region_id = static_cast<uint32_t>(region);
  if (!wan["listen"]) return Bad("listen", "missing (e.g. 0.0.0.0:7443)");
  HEDDLE_ASSIGN_OR_RETURN(o.listen_address, Str(wan["listen"], "listen"));
  if (const YAML::Node peers = wan["peers"]) {
    if (!peers.IsSequence()) return Bad("peers", "expected a list of {region, address}");
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string key = absl::StrFormat("peers[%u]", i);
      const YAML::Node p = peers[i];
      if (!p.IsMap()) return Bad(key, "expected {region: N, address: host:port}");
      HEDDLE_RETURN_IF_ERROR(UnknownKeys(
          p, "wan." + key + ".", {"region", "address", "cert_name", "token", "token_file"}));
      if (!p["region"]) return Bad(key + ".region", "missing");
      if (!p["address"]) return Bad(key + ".address", "missing (host:port)");
      WanPeer peer;
      HEDDLE_ASSIGN_OR_RETURN(
          uint64_t id, U64(p["region"], key + ".region", std::numeric_limits<uint32_t>::max()));
      peer.region_id = static_cast<uint32_t>(id);
      HEDDLE_ASSIGN_OR_RETURN(peer.address, Str(p["address"], key + ".address"));
      if (peer.address.empty()) return Bad(key + ".address", "empty (host:port)");
      if (p["cert_name"]) {
        HEDDLE_ASSIGN_OR_RETURN(peer.cert_name, Str(p["cert_name"], key + ".cert_name"));
        if (peer.cert_name.empty()) {
          return Bad(key + ".cert_name",
                     "empty (the DNS name in the peer's certificate; default: its region id)");
        }
      }
      if (p["token"] && p["token_file"]) {
        return Bad(key + ".token_file", "give token or token_file, not both");
      }
      if (p["token"]) {
        HEDDLE_ASSIGN_OR_RETURN(peer.token, Str(p["token"], key + ".token"));
        if (peer.token.empty()) return Bad(key + ".token", "empty");
      }
      if (p["token_file"]) {
        HEDDLE_ASSIGN_OR_RETURN(peer.token,
                                ReadTokenFile(p["token_file"], key + ".token_file", config_dir));
      }
      o.peers.push_back(std::move(peer));
    }
  }
  if (wan["streams_per_peer"]) {
    HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(wan["streams_per_peer"], "streams_per_peer", 64));
    o.streams_per_peer = static_cast<uint32_t>(v);
  }
  if (wan["wan_timeout"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.wan_timeout, Duration(wan["wan_timeout"], "wan_timeout"));
  }
  if (wan["rpc_timeout"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.rpc_timeout, Duration(wan["rpc_timeout"], "rpc_timeout"));
  }
  if (wan["push_timeout"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.push_timeout, Duration(wan["push_timeout"], "push_timeout"));
  }
  if (const YAML::Node q = wan["quorum"]) {
    if (!q.IsMap()) return Bad("quorum", "expected {min_regions, min_token_fraction}");
    HEDDLE_RETURN_IF_ERROR(UnknownKeys(q, "wan.quorum.", {"min_regions", "min_token_fraction"}));
    if (q["min_regions"]) {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(q["min_regions"], "quorum.min_regions", 1u << 20));
      o.quorum.min_regions = static_cast<uint32_t>(v);
    }
    if (q["min_token_fraction"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.quorum.min_token_fraction,
                              Double(q["min_token_fraction"], "quorum.min_token_fraction"));
    }
  }
  if (wan["token"] && wan["token_file"]) {
    return Bad("token_file", "give token or token_file, not both");
  }
  if (wan["token"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.token, Str(wan["token"], "token"));
  }
  if (wan["token_file"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.token, ReadTokenFile(wan["token_file"], "token_file", config_dir));
  }
  if (const YAML::Node t = wan["tls"]) {
    if (!t.IsMap()) return Bad("tls", "expected {cert, key, ca}");
    HEDDLE_RETURN_IF_ERROR(UnknownKeys(t, "wan.tls.", {"cert", "key", "ca", "server_name"}));
    if (t["cert"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.tls.cert_file, Str(t["cert"], "tls.cert"));
    }
    if (t["key"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.tls.key_file, Str(t["key"], "tls.key"));
    }
    if (t["ca"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.tls.ca_file, Str(t["ca"], "tls.ca"));
    }
    if (t["server_name"]) {
      HEDDLE_ASSIGN_OR_RETURN(o.tls.server_name, Str(t["server_name"], "tls.server_name"));
    }
  }
  if (wan["chunk_bytes"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.chunk_bytes,
                            U64(wan["chunk_bytes"], "chunk_bytes", uint64_t{1} << 40));
  }
  if (wan["coordinator"] && wan["coordinator"].IsScalar() &&
      wan["coordinator"].Scalar() == "auto") {
    o.coordinator_auto = true;
  } else if (wan["coordinator"]) {
    HEDDLE_ASSIGN_OR_RETURN(
        uint64_t v, U64(wan["coordinator"], "coordinator", std::numeric_limits<uint32_t>::max()));
    o.coordinator = static_cast<uint32_t>(v);
  }
  if (wan["keep_rounds"]) {
    HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(wan["keep_rounds"], "keep_rounds", 1024));
    o.keep_rounds = static_cast<uint32_t>(v);
  }
  if (wan["weighting"]) {
    HEDDLE_ASSIGN_OR_RETURN(std::string w, Str(wan["weighting"], "weighting"));
    if (w == "fednova") {
      o.weighting = Weighting::kFedNova;
    } else if (w == "tokens") {
      o.weighting = Weighting::kTokens;
    } else {
      return Bad("weighting", absl::StrFormat("\"%s\": expected fednova or tokens", w));
    }
  }
  if (wan["gateway_error_feedback"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.gateway_error_feedback,
                            Bool(wan["gateway_error_feedback"], "gateway_error_feedback"));
  }
  if (const YAML::Node s = wan["schedule"]) {
    HEDDLE_RETURN_IF_ERROR(ScheduleFromNode(s, o.schedule));
  }
  if (const YAML::Node t = wan["topology"]) {
    if (t.IsScalar()) {
      HEDDLE_ASSIGN_OR_RETURN(o.schedule.topology_file, Str(t, "topology"));
      if (o.schedule.topology_file.empty()) return Bad("topology", "empty (a file name)");
    } else if (t.IsMap()) {
      YAML::Emitter e;
      e << t;
      o.schedule.topology_yaml = e.c_str();
    } else {
      return Bad("topology", "expected a topology file name or an inline topology mapping");
    }
  }
  if (wan["state_dir"]) {
    HEDDLE_ASSIGN_OR_RETURN(o.state_dir, Str(wan["state_dir"], "state_dir"));
    if (o.state_dir.empty()) {
      return Bad("state_dir", "empty (a directory for the coordinator's decision log)");
    }
  }
  HEDDLE_RETURN_IF_ERROR(ValidateWanOptions(o));
  return o;
}

}  // namespace

absl::StatusOr<WanOptions> WanOptionsFromYaml(const YAML::Node& wan,
                                              const std::string& config_dir) {
  try {
    return FromNode(wan, config_dir);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("wan: %s", e.what()));
  }
}

}  // namespace heddle::relay
