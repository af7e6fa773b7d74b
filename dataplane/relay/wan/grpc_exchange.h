// File: dataplane/relay/wan/grpc_exchange.h
//
// The WAN exchange between gateways over gRPC (docs/relay-wan.md). Each gateway runs a gRPC
// server on its WAN address (not the worker port) and a client link to every other gateway:
//
//   - a compiled all-gather schedule (WanScheduleOptions; default direct, the full mesh) says
//     which peers each region frame goes to: a gateway pushes its region's frames as the slices
//     are submitted, and forwards the frames it receives that the schedule routes over it, over
//     streams_per_peer long-lived, per-frame acknowledged streams per peer (slice s on stream
//     s mod streams_per_peer), frames cut into chunks of at most chunk_bytes; every gateway must
//     run the same schedule (its digest is checked at the handshake, both ways);
//   - every gateway sends its region's summary (FinishRegion) to every other, and prepares each
//     region as soon as it is ready (frames checked against the summary, totals patched in);
//   - the coordinator (wan.coordinator: by default the lowest configured region id; or auto)
//     waits for every region or wan_timeout after its own region finished, applies the quorum,
//     and decides the round: included regions, their tokens and τ_eff, the weights and the
//     digest of the published aggregate; or aborts it;
//   - every other gateway long-polls the coordinator for the decision of its next round and
//     publishes the aggregate it prepared if that is the decision's bit for bit; else it fetches
//     from the coordinator any included frame it lacks, checks the digest and only then
//     publishes. No gateway publishes a round the coordinator did not decide, and every
//     gateway publishes the same bits; a gateway cut off from the coordinator waits, then
//     catches up on the rounds it missed (the coordinator keeps keep_rounds of them).
//
//   HEDDLE_ASSIGN_OR_RETURN(WanOptions wan, WanOptionsFromYaml(config["wan"]));
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<WanExchange> ex, NewGrpcExchange(spec, wan));
//   ex->SetOutcomeCallback(...); ex->SubmitSlice(...); ex->FinishRegion(...);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "control/collective/schedule.h"
#include "dataplane/relay/wan/exchange.h"

namespace YAML {
class Node;
}

namespace heddle::relay {

// 2: StreamFrames, summaries to every gateway, compiled schedules in ScheduleSwitch.
inline constexpr uint32_t kPeerProtocolVersion = 2;

struct WanPeer {
  uint32_t region_id = 0;
  std::string address;  // host:port; empty = not known yet (SetPeerAddress)
  // With mutual TLS: the name this peer's certificate must carry, among its subject alternative
  // names (or as its common name when it has none). Its calls claiming this region are refused
  // otherwise, and this gateway checks the peer's server certificate for the same name (unless
  // tls.server_name overrides it). Empty: the region id in decimal ("2").
  std::string cert_name;
  // The secret of this pair of gateways: sent on every call to this peer and required on every
  // call that claims to come from it (the peer's config names this gateway with the same
  // token). Empty: the job-wide WanOptions::token.
  std::string token;
};

struct WanQuorum {
  // A round is published only when at least min_regions regions with tokens are included and
  // they hold at least min_token_fraction of the expected tokens (each configured region's
  // tokens this round if it reported, else its tokens in the last round it reported);
  // otherwise the coordinator aborts the round everywhere.
  uint32_t min_regions = 1;
  double min_token_fraction = 0.0;
};

struct WanTls {
  // All three set: mutual TLS (the server requires and verifies client certificates against
  // ca; clients verify the server's). All empty: plaintext (use a token, and a private link).
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  std::string server_name;  // overrides the name checked in the server's certificate (tests)
};

// Which compiled schedule the gateways run for the exchange of region frames (an all-gather over
// the configured regions, docs/relay-wan.md §10). Every gateway must end up with the same one
// (checked at the handshake by digest).
struct WanScheduleOptions {
  // "direct" (every gateway sends its frames to every other: the full mesh), "ring", "auto"
  // (synthesized for `topology`), another builtin intent's name, or "file" (`file`).
  std::string name = "direct";
  std::string file;                       // schedule JSON (`heddle-flow compile`), name "file"
  std::map<std::string, int64_t> params;  // the builtin's parameters
  uint32_t pieces = 0;                    // pipelining depth; 0 = the compiler's choice
  // The WAN between the gateways in the topology YAML format (control/collective/topology.h),
  // its ranks named by region id; "" = a full mesh of equal links (then auto is direct).
  std::string topology_yaml;
  std::string topology_file;  // or read from this file (when topology_yaml is "")
  // Set: run exactly this schedule (tests; and what Start resolves the fields above into).
  std::shared_ptr<const collective::Schedule> compiled;
  // With name "auto": every recompile_every rounds the coordinator re-synthesizes the schedule
  // for `topology` with each link's bandwidth replaced by the send throughput its source gateway
  // measured, and if that is predicted at least min_gain times faster than the schedule in use
  // (re-priced on the same measured topology) announces it in the round's decision; every
  // gateway switches to it two rounds later (docs/relay-wan.md §10).
  bool measured = false;
  uint32_t recompile_every = 8;
  double min_gain = 1.1;
  // This gateway reports these send rates (bytes/s, by peer region) instead of the measured
  // ones: tests, or pinning a link known to be slower than a short measurement shows.
  std::map<uint32_t, double> rate_override;
};

struct WanOptions {
  uint32_t region_id = 0;
  std::string listen_address;  // e.g. "0.0.0.0:7443"; port 0 picks one (GrpcExchange::port())
  std::vector<WanPeer> peers;  // every other region
  // The region that decides every round: 0 = the lowest region id. Pick the gateway with the
  // shortest links to the others — its decision travels one more latency to each of them. Every
  // gateway must name the same one (checked at the handshake).
  uint32_t coordinator = 0;
  // `coordinator: auto`: the region whose decision reaches every gateway first on the schedule's
  // topology (ChooseCoordinator, schedule_source.h; wan.topology should then be given).
  bool coordinator_auto = false;
  uint32_t streams_per_peer = 4;
  absl::Duration wan_timeout = absl::Seconds(60);
  WanQuorum quorum;
  std::string token;  // job-wide bearer token, for peers without their own; empty = none
  WanTls tls;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint32_t keep_rounds = 4;
  Weighting weighting = Weighting::kFedNova;
  bool gateway_error_feedback = true;
  absl::Duration rpc_timeout = absl::Seconds(30);    // unary calls, and a chunk's progress
  absl::Duration push_timeout = absl::Seconds(600);  // one push or fetch stream
  absl::Duration decision_poll = absl::Seconds(10);  // how long the coordinator holds a poll
  // After a decision, frames still arriving from their own region are awaited; those that make
  // no progress for this long are fetched from the coordinator instead.
  absl::Duration fetch_grace = absl::Milliseconds(500);
  absl::Duration backoff_min = absl::Milliseconds(50);
  absl::Duration backoff_max = absl::Seconds(5);
  WanScheduleOptions schedule;
  // Coordinator: a directory for its decision log (decision_log.h). Set, every decision is
  // made durable there before any gateway sees it, and a restarted coordinator resumes from it
  // (same process identity, next round). Empty: a restarted coordinator is refused by the
  // followers and the job restarts from a checkpoint. Ignored on the other gateways.
  std::string state_dir;
  // Tests only: the coordinator's decider thread calls it (no lock held) right after a round's
  // decision is announced, before this gateway's own publication of it (which waits for it).
  std::function<void(uint64_t round)> after_announce_for_testing;
};

// The relay config's `wan:` block:
//   wan:
//     region: 2
//     listen: 0.0.0.0:7443
//     peers: [{region: 1, address: gw-eu.example:7443}, {region: 3, address: gw-us.example:7443}]
//                                   # per peer also: cert_name (TLS identity, default "<region>"),
//                                   # token / token_file (this pair's secret, default wan.token)
//     coordinator: 1                # default: the lowest region id; auto: by wan.topology
//     streams_per_peer: 4
//     wan_timeout: 60s              # or a number of seconds
//     quorum: {min_regions: 2, min_token_fraction: 0.5}
//     token_file: /etc/heddle/wan.token    # or token: "..."
//     tls: {cert: gw.pem, key: gw.key, ca: ca.pem}
//     chunk_bytes: 4194304
//     keep_rounds: 4
//     weighting: fednova            # or tokens
//     gateway_error_feedback: true
//     rpc_timeout: 30s
//     schedule: ring                # direct (default), ring, auto, a builtin, or
//                                   # {name: NAME, pieces: P, params: {k: v}} / {file: s.json}
//                                   # / {name: auto, measured: true, recompile_every: 8}
//     topology: wan-topology.yaml   # or inline: {ranks: ["1", "2", "3"], default: ..., links: ...}
//     state_dir: /var/lib/heddle/wan   # coordinator: its decision log (a restart resumes)
// Errors name the key (`wan.peers[1].address: ...`). A relative token_file (job-wide or a
// peer's) is read relative to `config_dir` (the config file's directory; empty: the working
// directory); the other file names are returned as written, for the caller to resolve.
absl::StatusOr<WanOptions> WanOptionsFromYaml(const YAML::Node& wan,
                                              const std::string& config_dir = "");
absl::Status ValidateWanOptions(const WanOptions& options);

struct WanPeerStats {
  uint32_t region_id = 0;
  std::string address;
  bool connected = false;  // the last handshake succeeded and no call failed since
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  uint64_t frames_forwarded = 0;  // of frames_sent: other regions' frames relayed to this peer
  // Measured send throughput to this peer: acknowledged frame bytes over the time some frame to
  // it was in flight (written, not yet acknowledged); 0 before the first frame. What a topology
  // of measured speeds would start from (docs/relay-wan.md §10).
  double send_bytes_per_second = 0;
  uint64_t reconnects = 0;          // failed calls that sent the link back to the handshake
  uint64_t last_summary_round = 0;  // coordinator: the last round this peer finished
  uint64_t queued_items = 0;        // frames and summaries waiting to be sent to this peer
};

struct WanStats {
  uint32_t region_id = 0;
  bool coordinator = false;
  uint32_t coordinator_region = 0;  // the gateway that decides (wan.coordinator, or auto)
  uint64_t slot_bytes = 0;          // one region's frames of a round: what the exchange moves
  // The schedule in use: its intent's name, digest, pieces and the compiler's predicted time of
  // one exchange (0 when built by hand).
  std::string schedule_name;
  uint64_t schedule_digest = 0;
  uint32_t schedule_pieces = 0;
  double schedule_predicted_s = 0;
  uint64_t schedule_switches = 0;  // schedules switched to from measured speeds
  uint64_t published_through = 0;
  // Every round resolved here is counted once, published or aborted: their sum is the rounds
  // resolved (delivered to the region side). The next two are parts of them.
  uint64_t rounds_published = 0;
  uint64_t rounds_aborted = 0;
  uint64_t rounds_without_this_region = 0;  // of rounds_published: without this region's frames
  // Of rounds_aborted (DataLoss): decided, but no longer kept when this gateway asked, or the
  // last round of a restarted coordinator's decision log (it holds no aggregate for it).
  uint64_t rounds_lost = 0;
  uint64_t frames_fetched = 0;  // from the coordinator
  // Follower, of rounds_published: rounds published from the aggregate prepared before the
  // decision came (its parts, weights and digest were the decision's).
  uint64_t rounds_prepared = 0;
  // Calls refused: no or wrong token, unknown region, a certificate not naming the claimed
  // region.
  uint64_t auth_failures = 0;
  uint64_t handshake_failures = 0;  // calls refused: spec digest, version, region set
  uint64_t malformed_messages = 0;  // bad chunk, frame, round or summary
  // Identical copies of a frame already held, acknowledged again (a peer's retry): neither
  // applied twice nor refused. A different frame for a held slice is refused (malformed).
  uint64_t duplicate_frames = 0;
  // Frames or summaries for a round outside this gateway's window: already over here, or more
  // than 2 rounds ahead (normal around restarts and catch-up; peers fetch what they need).
  uint64_t out_of_window_messages = 0;
  uint64_t digest_mismatches = 0;  // assembled aggregate ≠ the decision's digest
  // Decisions refused from a restarted coordinator that lost its decisions (no decision log).
  uint64_t coordinator_restarts = 0;
  // Coordinator with wan.state_dir: decisions read back from its decision log at start-up. Not
  // rounds resolved by this process, except the last (resolved here as aborted and lost).
  uint64_t decisions_replayed = 0;
  // From this region's FinishRegion to the round's publication here.
  double last_publish_seconds = 0;
  double publish_seconds_sum = 0;
  uint64_t publish_count = 0;
  std::vector<WanPeerStats> peers;
};

class GrpcExchange : public WanExchange {
 public:
  virtual int port() const = 0;  // the bound WAN port
  virtual WanStats Stats() const = 0;
  // A peer's address changed (or became known): the link reconnects there.
  virtual absl::Status SetPeerAddress(uint32_t region_id, const std::string& address) = 0;
};

// Starts the gateway's WAN server and links. Fails on bad options, unreadable TLS/token files
// or an address that cannot be bound.
absl::StatusOr<std::unique_ptr<GrpcExchange>> StartGrpcExchange(const ModelSpec& spec,
                                                                const WanOptions& options);
absl::StatusOr<std::unique_ptr<WanExchange>> NewGrpcExchange(const ModelSpec& spec,
                                                             const WanOptions& options);

}  // namespace heddle::relay
