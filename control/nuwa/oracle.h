// File: control/nuwa/oracle.h
//
// The plain reference the compiler is checked against (docs/nuwa.md §6): it expands a Fabric into
// an explicit graph — every host, every switch of every plane, every link, minus the failed ones —
// and answers "which ports of node N lie on a shortest valley-free path to host D?" by a breadth-
// first search from D over states (node, phase), phase = may still go up / may only go down.
// It knows nothing of labels beyond building the graph from Parent(); it is deliberately slow and
// obvious (one BFS per destination, O(nodes + links)), the HPCC-lineage simulators' method.
//
//   Oracle oracle(fabric);
//   std::vector<OracleHops> table = oracle.AllNextHops(dst);    // every node at once
//   fwd::NextHops nh = ToNextHops(fabric.shape, node.tier, table[oracle.NodeId(node)]);
//   std::vector<NodeRef> path = oracle.SimulatePath(table, src, dst, /*host_port=*/0, sport);
//
// Semantics: a path goes up zero or more tiers, then down, never down then up, and never through a
// host. A destination class with restrict_tier t (the first class whose prefix holds the
// destination's IPv4-mapped or IPv6 address) removes, for that destination, the up hops from tier
// t-1 to parents whose b_t is not in allowed_up_mask (down hops are unaffected).
#pragma once

#include <cstdint>
#include <vector>

#include "control/nuwa/fabric.h"
#include "dataplane/fwd/artifact.h"

namespace heddle::nuwa {

// The next-hop ports of one node towards one destination, in the node's port numbering (switches:
// down ports 0..m-1, up ports m..; hosts: plane * w_1 + b_1), ascending. Empty and !reachable: no
// valley-free path (or the node is dead). `local`: the node is the destination.
struct OracleHops {
  bool reachable = false;
  bool local = false;
  std::vector<uint32_t> ports;
  friend bool operator==(const OracleHops&, const OracleHops&) = default;
};

// The artifact's form of a switch's hop set: kDown + port, kUp + mask of up ports, kUnreachable.
// A set mixing down and up ports, or several down ports, cannot happen on an XGFT; it becomes
// kNotInFabric so that a comparison fails loudly.
fwd::NextHops ToNextHops(const Shape& shape, int tier, const OracleHops& hops);

// The index of the first class whose prefix holds `host`'s IPv4-mapped address (or its IPv6
// address when the plan has one); -1 for none.
int ClassOfHost(const Fabric& fabric, uint32_t host);

// The host ports a host's path set towards `dst` should have, given `ports`, the oracle's first
// hops: after the routing policy — the destination class `cls` (ClassOfHost; -1: none) keeps its
// planes and caps the paths, rail_local empties sets towards other rails, and the cap keeps the
// lowest ports (paths interleave ports first, docs/nuwa.md §4).
uint64_t PolicyPorts(const Fabric& fabric, uint32_t src, uint32_t dst, int cls, uint64_t ports);

class Oracle {
 public:
  explicit Oracle(const Fabric& fabric);

  // Dense node numbering: hosts first, then per plane, per tier 1..h, by index.
  uint32_t NodeId(NodeRef node) const;
  uint32_t node_count() const { return static_cast<uint32_t>(ports_.size()); }
  bool Alive(NodeRef node) const { return alive_[NodeId(node)]; }

  // Every node's next hops towards host `dst` (indexed by NodeId). One BFS.
  std::vector<OracleHops> AllNextHops(uint32_t dst) const;
  // One node's (runs the same BFS).
  OracleHops NextHops(NodeRef node, uint32_t dst) const;

  // The switches a packet (src, dst, UDP sport, dport 4791, IPv4 addresses) visits when host src
  // sends it on `host_port`: at every switch the oracle's next-hop set, one member chosen as the
  // fabric's hash model says (fwd::EcmpMember with SwitchSeed and the tier's bit offset). `table`
  // is AllNextHops(dst). Empty when the first hop is dead or a switch on the way has no path.
  std::vector<NodeRef> SimulatePath(const std::vector<OracleHops>& table, uint32_t src,
                                    uint32_t dst, uint32_t host_port, uint16_t sport) const;

 private:
  struct Port {
    uint32_t peer = 0;       // NodeId
    uint32_t peer_port = 0;  // the port at the other end
    bool up = false;
    bool alive = false;
  };
  NodeRef RefOf(uint32_t id) const;

  Fabric fabric_;
  std::vector<uint32_t> base_;  // [plane * (h+1) + tier]: first NodeId of that (plane, tier)
  std::vector<NodeRef> refs_;
  std::vector<uint8_t> alive_;
  std::vector<std::vector<Port>> ports_;  // per node, in port order
  std::vector<int> host_class_;
};

// A fresh Oracle per call: for one-off queries and tests.
OracleHops OracleNextHops(const Fabric& fabric, NodeRef node, uint32_t dst_host);

}  // namespace heddle::nuwa
