// File: control/nuwa/testing/random_fabric.h
//
// Fabrics for the compiler's property tests and benchmark: the textbook shapes (fat tree,
// leaf-spine, rail-optimized) built directly as Fabric values, and random small XGFTs with random
// planes, dual-homing, classes and failures, all from a seeded generator.
#pragma once

#include <cstdint>
#include <random>

#include "control/nuwa/fabric.h"

namespace heddle::nuwa::testing {

// k-ary fat tree: m = (k/2, k/2, k), w = (1, k/2, k/2); 10.0.0.0/8; crc32, offsets 0/8/16.
Fabric FatTree(uint32_t k);
// Leaf-spine: m = (hosts_per_leaf, leaves), w = (1, spines).
Fabric LeafSpine(uint32_t hosts_per_leaf, uint32_t leaves, uint32_t spines);
// Rail-optimized 3-tier: m = (servers_per_su, rails * sus_per_pod, pods), w = (1, spines, cores),
// rails = rails, planes = planes.
Fabric RailOptimized(uint32_t servers_per_su, uint32_t rails, uint32_t sus_per_pod, uint32_t pods,
                     uint32_t spines, uint32_t cores, uint32_t planes);

struct RandomOptions {
  bool classes = true;
  bool failures = true;
  uint32_t max_children = 4;
  uint32_t max_fanout = 4;
};
// A random valid 2- or 3-tier XGFT with random planes (1-2), dual-homing (w_1 up to 2), hash
// model, classes and failures (links at every tier, including host links, and switches).
Fabric RandomFabric(std::mt19937& rng, const RandomOptions& options = {});

// `count` distinct random failed links (any tier) and `switches` failed switches, added to f.
void AddRandomFailures(std::mt19937& rng, Fabric& f, int links, int switches);

}  // namespace heddle::nuwa::testing
