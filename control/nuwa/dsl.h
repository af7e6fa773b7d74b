// File: control/nuwa/dsl.h
//
// The Nüwa fabric DSL (docs/nuwa.md §1): a YAML file that names a topology kind with a few
// kind-specific parameters, an address plan, a switch hash model, routing policies and explicit
// failures. ParseFabricYaml() lowers it into the fabric model of fabric.h and validates it;
// FabricToYaml() writes a fabric back in canonical form (every key explicit, fixed order), which
// parses to the same Fabric.
//
//   HEDDLE_ASSIGN_OR_RETURN(nuwa::Fabric f, nuwa::LoadFabricFile("ft4.yaml"));
//   std::string canonical = nuwa::FabricToYaml(f);
//
// Every error names the place and the key, then says what is wrong and how to fix it:
//
//   ft4.yaml:3:6: fabric.k: 5 is odd; a k-ary fat tree needs an even k in 4..128
//
// The status carries one such line per problem found (a file with three typos gets three lines).
// Unknown keys are errors, with the closest known key suggested; nothing is silently ignored.
// Malformed YAML (syntax errors, deep nesting, several documents) gives an error, never an
// exception or a crash.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "control/nuwa/fabric.h"

namespace heddle::nuwa {

// Parses and validates a fabric description. `file_name` is only used in messages.
absl::StatusOr<Fabric> ParseFabricYaml(std::string_view text, std::string_view file_name);

// Reads `path` (at most 16 MiB) and parses it; errors name the path.
absl::StatusOr<Fabric> LoadFabricFile(const std::string& path);

// The canonical YAML of a fabric the DSL can describe (one that ParseFabricYaml produced, or one
// built with the same kind-specific shape); ParseFabricYaml(FabricToYaml(f)) == f.
std::string FabricToYaml(const Fabric& fabric);

// The tier names a kind gets when the file gives none: host/tor/agg/core (fat-tree, clos3),
// host/leaf/spine (clos2), host/leaf/spine/core (rail-optimized).
std::array<std::string, kMaxTiers + 1> DefaultTierNames(Kind kind, int tiers);

// The default hash.bit_offset of switch tier t: 6 * (t - 1), so that tiers read disjoint 6-bit
// windows of the hash (up to 64-way fanouts) and their choices are not correlated (polarized).
inline constexpr uint8_t DefaultBitOffset(int tier) { return static_cast<uint8_t>(6 * (tier - 1)); }

}  // namespace heddle::nuwa
