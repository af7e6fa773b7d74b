#include "control/nuwa/oracle.h"

#include <algorithm>
#include <deque>
#include <set>

#include "dataplane/fwd/hash_model.h"

namespace heddle::nuwa {
namespace {

bool PrefixMatches(const std::array<uint8_t, 16>& addr, const std::array<uint8_t, 16>& prefix,
                   int len) {
  for (int bit = 0; bit < len; ++bit) {
    const uint8_t m = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((addr[bit / 8] & m) != (prefix[bit / 8] & m)) return false;
  }
  return true;
}

}  // namespace

int ClassOfHost(const Fabric& fabric, uint32_t host) {
  const auto& classes = fabric.routing.classes;
  if (classes.empty()) return -1;
  const uint32_t v4 = HostIpv4(fabric.shape, fabric.addresses, host);
  std::array<uint8_t, 16> mapped{};
  mapped[10] = mapped[11] = 0xFF;
  mapped[12] = static_cast<uint8_t>(v4 >> 24);
  mapped[13] = static_cast<uint8_t>(v4 >> 16);
  mapped[14] = static_cast<uint8_t>(v4 >> 8);
  mapped[15] = static_cast<uint8_t>(v4);
  std::array<uint8_t, 16> v6{};
  if (fabric.addresses.has_ipv6) v6 = HostIpv6(fabric.shape, fabric.addresses, host);
  for (size_t c = 0; c < classes.size(); ++c) {
    if (PrefixMatches(mapped, classes[c].prefix, classes[c].prefix_len)) return static_cast<int>(c);
    if (fabric.addresses.has_ipv6 && PrefixMatches(v6, classes[c].prefix, classes[c].prefix_len)) {
      return static_cast<int>(c);
    }
  }
  return -1;
}

uint64_t PolicyPorts(const Fabric& f, uint32_t src, uint32_t dst, int cls, uint64_t ports) {
  const Shape& sh = f.shape;
  uint32_t limit = f.routing.max_paths;
  if (cls >= 0) {
    const DestinationClass& c = f.routing.classes[cls];
    if (c.planes_mask != 0) {
      uint64_t allowed = 0;
      for (uint32_t p = 0; p < sh.planes; ++p) {
        if (c.planes_mask >> p & 1) allowed |= ((uint64_t{1} << sh.w[1]) - 1) << (p * sh.w[1]);
      }
      ports &= allowed;
    }
    if (c.max_paths != 0) limit = c.max_paths;
  }
  if (f.routing.rail_local && sh.rails != 0) {
    const uint32_t src_rail = (src / sh.m[1]) % sh.m[2] % sh.rails;
    const uint32_t dst_rail = (dst / sh.m[1]) % sh.m[2] % sh.rails;
    if (src_rail != dst_rail) ports = 0;
  }
  uint64_t kept = 0;
  for (uint32_t n = 0; ports != 0 && n < limit; ++n) {
    kept |= ports & -ports;
    ports &= ports - 1;
  }
  return kept;
}

fwd::NextHops ToNextHops(const Shape& shape, int tier, const OracleHops& hops) {
  fwd::NextHops out;
  if (hops.local) {
    out.kind = fwd::HopKind::kLocal;
    return out;
  }
  if (!hops.reachable || hops.ports.empty()) {
    out.kind = fwd::HopKind::kUnreachable;
    return out;
  }
  const uint32_t down = DownPorts(shape, tier);
  int downs = 0, ups = 0;
  for (uint32_t p : hops.ports) {
    if (p < down) {
      ++downs;
      out.down_port = static_cast<uint16_t>(p);
    } else {
      ++ups;
      out.up_mask |= uint64_t{1} << (p - down);
    }
  }
  if (downs == 1 && ups == 0) {
    out.kind = fwd::HopKind::kDown;
    out.up_mask = 0;
  } else if (downs == 0) {
    out.kind = fwd::HopKind::kUp;
  } else {
    out = fwd::NextHops{};  // kNotInFabric: not a shape the artifact can express
  }
  return out;
}

Oracle::Oracle(const Fabric& fabric) : fabric_(fabric) {
  const Shape& s = fabric_.shape;
  const int h = s.tiers;
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(s, 0));
  base_.assign(s.planes * (h + 1), 0);
  uint32_t next = hosts;
  for (uint32_t p = 0; p < s.planes; ++p) {
    for (int t = 1; t <= h; ++t) {
      base_[p * (h + 1) + t] = next;
      next += static_cast<uint32_t>(NodeCount(s, t));
    }
  }
  refs_.resize(next);
  for (uint32_t i = 0; i < hosts; ++i) refs_[i] = NodeRef{0, 0, i};
  for (uint32_t p = 0; p < s.planes; ++p) {
    for (int t = 1; t <= h; ++t) {
      for (uint32_t i = 0; i < NodeCount(s, t); ++i) {
        refs_[base_[p * (h + 1) + t] + i] =
            NodeRef{static_cast<uint8_t>(p), static_cast<uint8_t>(t), i};
      }
    }
  }
  const std::set<NodeRef> dead_switches(fabric_.failures.switches.begin(),
                                        fabric_.failures.switches.end());
  const std::set<LinkRef> dead_links(fabric_.failures.links.begin(), fabric_.failures.links.end());
  alive_.assign(next, 1);
  for (const NodeRef& n : dead_switches) alive_[NodeId(n)] = 0;

  // Every link, from its lower end: the lower node's up port u meets the parent's down port
  // a_{parent tier} of the lower node's label.
  ports_.assign(next, {});
  for (uint32_t id = 0; id < next; ++id) {
    const NodeRef n = refs_[id];
    ports_[id].resize(DownPorts(s, n.tier) + UpPorts(s, n.tier));
  }
  for (uint32_t id = 0; id < next; ++id) {
    const NodeRef lower = refs_[id];
    const uint32_t up_ports = UpPorts(s, lower.tier);
    const uint32_t down_ports = DownPorts(s, lower.tier);
    const Label label = LabelOf(s, lower.tier, lower.index);
    for (uint32_t u = 0; u < up_ports; ++u) {
      const NodeRef parent = Parent(s, lower, u);
      const uint32_t pid = NodeId(parent);
      const uint32_t d = label.a[parent.tier];
      const bool alive = alive_[id] && alive_[pid] && !dead_links.count(LinkRef{lower, u});
      ports_[id][down_ports + u] = Port{pid, d, true, alive};
      ports_[pid][d] = Port{id, down_ports + u, false, alive};
    }
  }
  host_class_.resize(hosts);
  for (uint32_t i = 0; i < hosts; ++i) host_class_[i] = ClassOfHost(fabric_, i);
}

uint32_t Oracle::NodeId(NodeRef node) const {
  if (node.tier == 0) return node.index;
  return base_[node.plane * (fabric_.shape.tiers + 1) + node.tier] + node.index;
}

NodeRef Oracle::RefOf(uint32_t id) const { return refs_[id]; }

std::vector<OracleHops> Oracle::AllNextHops(uint32_t dst) const {
  const Shape& s = fabric_.shape;
  const uint32_t n = node_count();
  const int cls = host_class_[dst];
  const DestinationClass* c = cls >= 0 ? &fabric_.routing.classes[cls] : nullptr;
  // May the packet for `dst` take the up hop lower -> (parent, through lower's up port u)?
  auto up_allowed = [&](uint32_t lower_id, uint32_t u) {
    if (c == nullptr || c->restrict_tier == 0) return true;
    const NodeRef lower = refs_[lower_id];
    if (lower.tier + 1 != c->restrict_tier) return true;
    return ((c->allowed_up_mask >> u) & 1) != 0;  // b_t of the parent = u
  };

  // dist[2 * id + phase]: hops to dst; phase 0 = may still go up, 1 = may only go down.
  std::vector<int32_t> dist(2 * size_t{n}, -1);
  std::deque<uint32_t> queue;
  dist[2 * size_t{dst} + 1] = 0;
  queue.push_back(2 * dst + 1);
  while (!queue.empty()) {
    const uint32_t state = queue.front();
    queue.pop_front();
    const uint32_t x = state / 2;
    const bool down_phase = state % 2;
    const int32_t d = dist[state];
    for (uint32_t port = 0; port < ports_[x].size(); ++port) {
      const Port& e = ports_[x][port];
      if (!e.alive) continue;
      if (down_phase && e.up) {
        // The parent reached x by a down hop, in either phase.
        for (uint32_t ph = 0; ph < 2; ++ph) {
          const size_t pred = 2 * size_t{e.peer} + ph;
          if (dist[pred] < 0) {
            dist[pred] = d + 1;
            queue.push_back(static_cast<uint32_t>(pred));
          }
        }
      } else if (!down_phase && !e.up) {
        // The child reached x by an up hop, so it was in the up phase.
        const uint32_t child_up = e.peer_port - DownPorts(s, refs_[e.peer].tier);
        if (!up_allowed(e.peer, child_up)) continue;
        const size_t pred = 2 * size_t{e.peer};
        if (dist[pred] < 0) {
          dist[pred] = d + 1;
          queue.push_back(static_cast<uint32_t>(pred));
        }
      }
    }
  }

  std::vector<OracleHops> out(n);
  for (uint32_t v = 0; v < n; ++v) {
    OracleHops& hops = out[v];
    if (v == dst) {
      hops.local = hops.reachable = true;
      continue;
    }
    const int32_t d0 = dist[2 * size_t{v}];
    if (d0 <= 0 || !alive_[v]) continue;
    const uint32_t down_ports = DownPorts(s, refs_[v].tier);
    for (uint32_t port = 0; port < ports_[v].size(); ++port) {
      const Port& e = ports_[v][port];
      if (!e.alive) continue;
      if (e.up) {
        if (up_allowed(v, port - down_ports) && dist[2 * size_t{e.peer}] == d0 - 1) {
          hops.ports.push_back(port);
        }
      } else if (dist[2 * size_t{e.peer} + 1] == d0 - 1) {
        hops.ports.push_back(port);
      }
    }
    hops.reachable = !hops.ports.empty();
  }
  return out;
}

OracleHops Oracle::NextHops(NodeRef node, uint32_t dst) const {
  return AllNextHops(dst)[NodeId(node)];
}

std::vector<NodeRef> Oracle::SimulatePath(const std::vector<OracleHops>& table, uint32_t src,
                                          uint32_t dst, uint32_t host_port, uint16_t sport) const {
  const Shape& s = fabric_.shape;
  std::vector<NodeRef> path;
  if (host_port >= ports_[src].size() || !ports_[src][host_port].alive) return path;
  const uint32_t src_addr = HostIpv4(s, fabric_.addresses, src);
  const uint32_t dst_addr = HostIpv4(s, fabric_.addresses, dst);
  const auto key = fwd::FlowKey4(src_addr, dst_addr, 17, sport, 4791);
  const auto function = static_cast<fwd::HashFunction>(fabric_.hash.function);
  uint32_t at = ports_[src][host_port].peer;
  for (int hop = 0; hop <= 2 * s.tiers; ++hop) {
    if (at == dst) return path;
    const NodeRef ref = refs_[at];
    path.push_back(ref);
    const OracleHops& hops = table[at];
    if (!hops.reachable || hops.ports.empty()) return {};
    uint32_t member = 0;
    if (hops.ports.size() > 1) {
      member = fwd::EcmpMember(function, SwitchSeed(fabric_.hash.seed_base, ref),
                               fabric_.hash.bit_offset[ref.tier], key,
                               static_cast<uint32_t>(hops.ports.size()));
    }
    at = ports_[at][hops.ports[member]].peer;
  }
  return {};  // a loop: cannot happen on shortest paths
}

OracleHops OracleNextHops(const Fabric& fabric, NodeRef node, uint32_t dst_host) {
  return Oracle(fabric).NextHops(node, dst_host);
}

}  // namespace heddle::nuwa
