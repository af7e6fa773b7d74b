// File: control/nuwa/compiler.h
//
// The Nüwa compiler (docs/nuwa.md §3-§5): a Fabric (fabric.h) in, one forwarding artifact per
// node role out — one per switch tier, one for the hosts — plus a digest of the description.
//
//   HEDDLE_ASSIGN_OR_RETURN(Compiled out, Compile(fabric));
//   for (const fwd::ArtifactSpec& spec : out.switches) Write(fwd::Serialize(spec));
//
// What an artifact holds. The routing rule of a role is implied by the XGFT labels (fabric.h), so
// a failure-free artifact carries only the shape, the address plan, the hash model, the classes
// and (hosts) the entropy lists: compiling it costs O(tiers), whatever the fabric's size.
// Failures add exceptions, computed without building the explicit graph:
//   * node masks: for every switch and every LCA tier L above it, the up ports still usable
//     towards a destination whose lowest common ancestor with the switch is at tier L — the link
//     is alive, the parent is alive and the parent can itself still climb to tier L on alive
//     links (and, for a class that restricts the tier-(t-1) -> t hop, on allowed ones). Only
//     switches where some mask is not "all up ports" get an entry. Host artifacts carry the same
//     for hosts (plane 0, host index; bits = host ports, L = 1..h) whose ports are affected.
//   * overrides: a failed link or switch changes which ancestors of a destination can still reach
//     it going down (its down-reachability D) for the destinations below the link's lower end or
//     below the switch — one tier-1 group (level 1, dst = host / m_1) at a time, or one host
//     (level 0) for a host link. For each such destination the compiler evaluates the valley-free
//     shortest paths on the failed fabric (per plane, top-down over the label arithmetic: R(v) =
//     the lowest tier at which v can reach a member of D by climbing; v's next hops are its up
//     ports to parents with the same R, or its down port when v is in D) and emits an override for
//     every node whose exact next-hop set differs from what the rule with masks (and any level-1
//     override, for level 0) gives, including kUnreachable. Per (plane, tier, level, dst), when
//     fewer entries result, one wildcard override (node fwd::kAllNodes: unreachable) plus an
//     override for each node that still reaches the destination replaces them.
//   * host destination exceptions (fwd::DstExceptionSpec): from the same evaluation, which tier-1
//     switches still reach each affected destination. On an XGFT a tier-1 switch's distance to a
//     destination is its LCA tier or infinite, so a host port is on a shortest path exactly when
//     its tier-1 switch reaches the destination; for a source whose climb is intact that depends
//     only on (port, LCA tier, destination), which one entry per affected destination states,
//     with the most paths left per port (the entropy cap). Sources whose own failures combine with
//     the destination's get host overrides with their exact ports.
//
// The lookup semantics the artifacts are compiled for (fwd::SwitchTable implements them;
// EvaluateSwitch4() below is the compiler's own statement, used by the tests): for switch
// (plane, index) at tier i and a destination address:
//   1. not a host of the fabric -> kNotInFabric;
//   2. an override (plane, index or kAllNodes, 0, host) -> it (the node's own first); else an
//      override (plane, index or kAllNodes, 1, host / m_1) -> it (a tier-1 kDown: port a_1);
//   3. the switch's a-digits above tier i equal the destination's -> kDown, port = digit a_i;
//   4. otherwise L = the highest tier j > i where they differ; mask = the node's up_mask[L] (all
//      w_{i+1} up ports without an entry); the first class whose prefix holds the address, when
//      its restrict_tier is i+1, ands its allowed_up_mask in; an empty mask is kUnreachable.
//
// Determinism: the same Fabric gives byte-identical artifacts (failures are sorted and deduped
// first; every container is emitted in key order).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "control/nuwa/fabric.h"
#include "dataplane/fwd/artifact.h"

namespace heddle::nuwa {

struct CompileStats {
  uint32_t rules = 0;                  // role artifacts: one per switch tier, one for hosts
  uint64_t node_masks = 0;             // exception entries, all artifacts
  uint64_t overrides = 0;              //
  uint64_t exceptions = 0;             // node_masks + overrides + dst_exceptions
  uint64_t affected_destinations = 0;  // groups and hosts whose down-reachability changed
  uint64_t wildcards = 0;              // of the overrides: wildcard "unreachable" entries
  uint64_t dst_exceptions = 0;         // the host artifact's destination exceptions
  uint64_t bytes = 0;                  // sum of the artifacts' serialized sizes (estimate)
};

struct Compiled {
  std::vector<fwd::ArtifactSpec> switches;  // [t - 1]: the tier-t switches' artifact
  fwd::ArtifactSpec host;
  uint64_t fabric_digest = 0;
  CompileStats stats;
};

// Validates the fabric (Validate()) and compiles it.
absl::StatusOr<Compiled> Compile(const Fabric& fabric);

// A stable 64-bit digest of the whole description (FNV-1a over a canonical little-endian
// encoding of every field; failures sorted and deduplicated): equal fabrics, equal digests.
uint64_t FabricDigest(const Fabric& fabric);

// The entropy (UDP source port) lists of the host artifact, by LCA tier (docs/nuwa.md §5).
fwd::EntropySpec ChooseEntropies(const Fabric& fabric);

// The bytes fwd::Serialize writes for `spec`, from the section sizes of format version 2
// (dataplane/fwd/artifact.cc): 64-byte header, directory, 40-byte node masks, 24-byte overrides,
// 32-byte destination exceptions.
uint64_t EstimateArtifactBytes(const fwd::ArtifactSpec& spec);

// The inverse of what Compile() copies into every artifact: as much of the Fabric as an artifact
// carries (shape, addresses, hash, routing policy and classes; not the kind, link speeds, failures,
// or tier names, which become "host", "tier1", ...). For tools that work from artifacts alone.
Fabric FabricFromArtifact(const fwd::ArtifactSpec& artifact);

// The next-hop set a switch artifact gives node (plane, index) of its tier for the IPv4
// destination `dst` (host order), following the semantics above; no precomputed table.
fwd::NextHops EvaluateSwitch4(const fwd::ArtifactSpec& spec, uint8_t plane, uint32_t index,
                              uint32_t dst);

}  // namespace heddle::nuwa
