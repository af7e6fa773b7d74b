// FwdService: a good host artifact becomes this host's path table (its PrefixPathSets() through
// the port map), every kind of bad artifact is refused with the running one untouched, dry runs
// publish nothing, rollback and the bounded history, diff, and a publication through a real
// LbControl while a worker polls.
#include "tools/heddled/fwd_service.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "control/config/config.h"
#include "control/nuwa/fabric.h"
#include "dataplane/pipeline/lb_control.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::heddled {
namespace {

using ::testing::HasSubstr;

// A small 2-tier fabric's host artifact: 4 ToRs of 4 hosts, each host on 2 ToRs (w_1 = 2: two
// host ports), 4 spines, 10.0.0.0/8, CRC32 hash; `seed` varies the hash seed and the entropies.
fwd::ArtifactSpec HostSpec(const std::string& fabric = "pod-a", uint32_t seed = 7) {
  nuwa::Shape shape;
  shape.tiers = 2;
  shape.m = {0, 4, 4, 0};
  shape.w = {0, 2, 4, 0};
  nuwa::AddressPlan plan;
  plan.ipv4_base = 10u << 24;
  plan.ipv4_prefix_len = 8;
  EXPECT_TRUE(nuwa::LayOutAddresses(shape, plan).ok());
  fwd::ArtifactSpec s;
  s.role = fwd::Role::kHost;
  s.tier = 0;
  s.fabric_digest = 0xfab0000000000000ull | seed;
  s.fabric_name = fabric;
  s.role_name = "host";
  s.shape.tiers = 2;
  s.shape.planes = 1;
  s.shape.m = {0, 4, 4, 0};
  s.shape.w = {0, 2, 4, 0};
  s.addresses.ipv4_base = plan.ipv4_base;
  s.addresses.ipv4_prefix_len = plan.ipv4_prefix_len;
  s.addresses.width = plan.width;
  s.addresses.shift = plan.shift;
  s.hash.function = 1;
  s.hash.seed_base = seed;
  s.hash.bit_offset = {0, 0, 8, 0};
  s.max_paths = 8;
  s.entropy.by_lca[2] = {0xc000 + seed, 0xc100 + seed, 0xc200 + seed, 0xc300 + seed};
  return s;
}

std::vector<uint8_t> Bytes(const fwd::ArtifactSpec& s) { return fwd::Serialize(s); }

// Records what an install publishes.
struct Published {
  std::vector<std::shared_ptr<const lb::PathTable>> tables;
};

FwdService::Options Opts(Published* pub, std::string node = "host[5]") {
  FwdService::Options o;
  o.node = std::move(node);
  o.fabric = "pod-a";
  o.port_map = {1, 2};  // artifact host port 0 -> daemon port 1 (uplink0), 1 -> 2 (uplink1)
  o.port_names = {"host0", "uplink0", "uplink1"};
  o.publish = [pub](std::shared_ptr<const lb::PathTable> t) {
    pub->tables.push_back(std::move(t));
    return absl::OkStatus();
  };
  int64_t now = 1'700'000'000'000;
  o.now_unix_ms = [now]() mutable { return now += 1000; };
  return o;
}

// What the path table must hold for `spec` and host `host`: HostTable's prefix path sets, ports
// mapped by `port_map`, every path with its next-hop MAC; prefixes without paths route to none.
void ExpectTableIs(const lb::PathTable& t, const fwd::ArtifactSpec& spec, uint32_t host,
                   const std::vector<uint16_t>& port_map) {
  absl::StatusOr<fwd::HostTable> ht = fwd::HostTable::Build(spec, host);
  ASSERT_TRUE(ht.ok()) << ht.status();
  const std::vector<fwd::HostTable::PrefixPaths> want = ht->PrefixPathSets(false);
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(t.spec().routes.size(), want.size());
  size_t with_paths = 0;
  for (const fwd::HostTable::PrefixPaths& pp : want) {
    // The address at the prefix itself resolves to exactly this prefix's set (most specific).
    const lb::PathSetView got = t.LookupAddress(pp.prefix.data());
    lb::Prefix p{pp.prefix, pp.prefix_len};
    SCOPED_TRACE(lb::PrefixString(p));
    if (pp.kind != fwd::HopKind::kUp || pp.paths.empty()) {
      EXPECT_EQ(got.size, 0u);
      continue;
    }
    ++with_paths;
    ASSERT_EQ(got.size, pp.paths.size());
    for (size_t i = 0; i < pp.paths.size(); ++i) {
      EXPECT_EQ(got[i].port, port_map[pp.paths[i].port]);
      EXPECT_EQ(got[i].entropy, pp.paths[i].entropy);
      EXPECT_TRUE(got[i].has_next_hop_mac);
      EXPECT_EQ(got[i].next_hop_mac, pp.paths[i].next_hop_mac);
    }
  }
  EXPECT_GT(with_paths, 0u);
  EXPECT_EQ(t.spec().default_set, -1);  // destinations outside the fabric are not balanced
}

TEST(FwdService, InstallsAGoodArtifactAndPublishesItsPathSets) {
  Published pub;
  FwdService svc(Opts(&pub));
  const fwd::ArtifactSpec a = HostSpec();
  const std::vector<uint8_t> bytes = Bytes(a);
  absl::StatusOr<api::ArtifactView> v = svc.Install(bytes, "a.nuwa", false);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(pub.tables.size(), 1u);
  ExpectTableIs(*pub.tables[0], a, 5, {1, 2});
  EXPECT_EQ(v->id, 1u);
  EXPECT_EQ(v->source, "a.nuwa");
  EXPECT_EQ(v->bytes, bytes.size());
  EXPECT_EQ(v->checksum, fwd::ArtifactChecksum(bytes));
  EXPECT_EQ(v->fabric, "pod-a");
  EXPECT_EQ(v->fabric_digest, a.fabric_digest);
  EXPECT_EQ(v->host, 5u);
  EXPECT_EQ(v->node, "host[5] (10.0.0.5)");  // a_1 = 1, a_2 = 1 in 2-bit fields
  EXPECT_EQ(v->shape, "2 tiers, m 4x4, w 2x4, 1 plane");
  EXPECT_THAT(v->hash, HasSubstr("crc32 seed 0x00000007"));
  EXPECT_EQ(v->path_sets, pub.tables[0]->num_sets());
  EXPECT_EQ(v->prefixes + v->no_path, pub.tables[0]->spec().routes.size());
  EXPECT_EQ(v->installed_unix_ms, 1'700'000'001'000);
  const api::ArtifactStateView st = svc.State();
  ASSERT_TRUE(st.installed.has_value());
  EXPECT_EQ(st.installed->id, 1u);
  EXPECT_TRUE(st.history.empty());
  EXPECT_EQ(st.generation, 1u);
  EXPECT_EQ(svc.counters().installs, 1u);
  EXPECT_TRUE(svc.counters().installed);
}

TEST(FwdService, NodeByAddressIsTheSameHost) {
  Published pub;
  FwdService svc(Opts(&pub, "10.0.0.5"));
  absl::StatusOr<api::ArtifactView> v = svc.Install(Bytes(HostSpec()), "a.nuwa", false);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->host, 5u);
  ASSERT_EQ(pub.tables.size(), 1u);
  ExpectTableIs(*pub.tables[0], HostSpec(), 5, {1, 2});
}

TEST(FwdService, EveryKindOfBadArtifactIsRefusedAndTheRunningOneStays) {
  Published pub;
  FwdService::Options o = Opts(&pub);
  FwdService svc(o);
  const std::vector<uint8_t> good = Bytes(HostSpec());
  ASSERT_TRUE(svc.Install(good, "good.nuwa", false).ok());
  ASSERT_EQ(pub.tables.size(), 1u);
  const std::shared_ptr<const lb::PathTable> running = pub.tables[0];

  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string message;
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  };
  std::vector<Case> cases;
  {
    std::vector<uint8_t> b = good;
    b[b.size() / 2] ^= 0x5a;  // a flipped byte in the body: the checksum no longer matches
    cases.push_back({"corrupt", b, "artifact corrupt.nuwa"});
  }
  cases.push_back({"truncated", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2),
                   "artifact truncated.nuwa"});
  cases.push_back({"garbage", std::vector<uint8_t>(64, 0xff), "artifact garbage.nuwa"});
  {
    fwd::ArtifactSpec s = HostSpec();
    s.role = fwd::Role::kSwitch;
    s.tier = 1;
    s.role_name = "tor";
    s.entropy = {};
    cases.push_back({"switch", Bytes(s), "heddled runs on a host"});
  }
  cases.push_back({"other-fabric", Bytes(HostSpec("pod-b")), "fwd.fabric"});
  {
    // A fabric of 4 hosts: host[5] is not in it.
    fwd::ArtifactSpec s = HostSpec();
    s.shape.m = {0, 2, 2, 0};
    nuwa::Shape shape;
    shape.tiers = 2;
    shape.m = {0, 2, 2, 0};
    shape.w = {0, 2, 4, 0};
    nuwa::AddressPlan plan;
    plan.ipv4_base = 10u << 24;
    plan.ipv4_prefix_len = 8;
    ASSERT_TRUE(nuwa::LayOutAddresses(shape, plan).ok());
    s.addresses.width = plan.width;
    s.addresses.shift = plan.shift;
    cases.push_back({"small-fabric", Bytes(s), "fwd.node: \"host[5]\" is not in fabric pod-a"});
  }
  {
    // Two planes of two ports each: host ports 2 and 3 have no uplink in the port map.
    fwd::ArtifactSpec s = HostSpec();
    s.shape.planes = 2;
    cases.push_back(
        {"more-ports", Bytes(s), "fwd.ports maps only 2", absl::StatusCode::kResourceExhausted});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<api::ArtifactView> r = svc.Install(c.bytes, c.name + ".nuwa", false);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
    EXPECT_EQ(pub.tables.size(), 1u);  // nothing published
    const api::ArtifactStateView st = svc.State();
    ASSERT_TRUE(st.installed.has_value());
    EXPECT_EQ(st.installed->id, 1u);
    EXPECT_EQ(st.installed->checksum, fwd::ArtifactChecksum(good));
    EXPECT_TRUE(st.history.empty());
  }
  EXPECT_EQ(svc.counters().rejected, cases.size());
  EXPECT_EQ(svc.counters().installs, 1u);
  EXPECT_EQ(svc.counters().generation, 1u);

  // Capacity: a daemon that takes one path set refuses this host's several.
  FwdService::Options tiny = Opts(&pub);
  tiny.max_path_sets = 1;
  FwdService small(tiny);
  absl::StatusOr<api::ArtifactView> r = small.Install(good, "good.nuwa", false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("more than 1 distinct path sets"));
  // The host's address outside the fabric's prefix.
  FwdService away(Opts(&pub, "192.168.0.1"));
  r = away.Install(good, "good.nuwa", false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("192.168.0.1 is no host address of fabric pod-a"));
  EXPECT_EQ(pub.tables.size(), 1u);
}

TEST(FwdService, DryRunChecksAndPublishesNothing) {
  Published pub;
  FwdService svc(Opts(&pub));
  absl::StatusOr<api::ArtifactView> v = svc.Install(Bytes(HostSpec()), "a.nuwa", true);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->id, 0u);
  EXPECT_GT(v->path_sets, 0u);
  EXPECT_TRUE(pub.tables.empty());
  EXPECT_FALSE(svc.State().installed.has_value());
  EXPECT_FALSE(svc.Install(Bytes(HostSpec("pod-b")), "b.nuwa", true).ok());
  EXPECT_EQ(svc.counters().rejected, 0u);  // a refused dry run is not a refused install
  EXPECT_EQ(svc.counters().installs, 0u);
}

TEST(FwdService, RollbackToThePreviousAndToAnId) {
  Published pub;
  FwdService svc(Opts(&pub));
  EXPECT_EQ(svc.Rollback(std::nullopt).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<fwd::ArtifactSpec> specs = {HostSpec("pod-a", 1), HostSpec("pod-a", 2),
                                                HostSpec("pod-a", 3)};
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(svc.Install(Bytes(specs[i]), absl::StrCat("s", i), false).ok());
  }
  ASSERT_EQ(pub.tables.size(), 3u);
  absl::StatusOr<api::ArtifactView> r = svc.Rollback(std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, 2u);
  EXPECT_EQ(r->source, "s1");
  ASSERT_EQ(pub.tables.size(), 4u);
  EXPECT_EQ(pub.tables[3], pub.tables[1]);  // the very table built at its install
  ExpectTableIs(*pub.tables[3], specs[1], 5, {1, 2});
  api::ArtifactStateView st = svc.State();
  EXPECT_EQ(st.installed->id, 2u);
  ASSERT_EQ(st.history.size(), 1u);
  EXPECT_EQ(st.history[0].id, 1u);
  // To an id: #1; #3 is gone for good.
  ASSERT_TRUE(svc.Install(Bytes(specs[2]), "s2 again", false).ok());  // #4
  EXPECT_THAT(svc.Rollback(3).status().message(), HasSubstr("not in the history"));
  EXPECT_THAT(svc.Rollback(4).status().message(), HasSubstr("is the running one"));
  r = svc.Rollback(1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, 1u);
  ExpectTableIs(*pub.tables.back(), specs[0], 5, {1, 2});
  st = svc.State();
  EXPECT_TRUE(st.history.empty());
  EXPECT_EQ(svc.Rollback(std::nullopt).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.rollbacks, 2u);
  EXPECT_EQ(st.generation, 6u);  // 4 installs + 2 rollbacks
}

TEST(FwdService, HistoryIsBounded) {
  Published pub;
  FwdService::Options o = Opts(&pub);
  o.history = 3;
  FwdService svc(o);
  for (uint32_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(svc.Install(Bytes(HostSpec("pod-a", i)), absl::StrCat("s", i), false).ok());
  }
  const api::ArtifactStateView st = svc.State();
  EXPECT_EQ(st.installed->id, 5u);
  ASSERT_EQ(st.history.size(), 2u);
  EXPECT_EQ(st.history[0].id, 4u);
  EXPECT_EQ(st.history[1].id, 3u);
  EXPECT_THAT(svc.Rollback(2).status().message(), HasSubstr("roll back to one of 4, 3"));
  ASSERT_TRUE(svc.Rollback(3).ok());
  EXPECT_EQ(svc.Rollback(std::nullopt).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FwdService, DiffNamesChangedFieldsAndPathSets) {
  Published pub;
  FwdService svc(Opts(&pub));
  EXPECT_EQ(svc.Diff(Bytes(HostSpec())).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(svc.Install(Bytes(HostSpec("pod-a", 1)), "a", false).ok());
  absl::StatusOr<api::ArtifactDiffView> same = svc.Diff(Bytes(HostSpec("pod-a", 1)));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->fields.empty());
  EXPECT_TRUE(same->paths.empty());
  EXPECT_EQ(same->prefixes_same, pub.tables[0]->spec().routes.size());

  absl::StatusOr<api::ArtifactDiffView> d = svc.Diff(Bytes(HostSpec("pod-a", 2)));
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> names;
  for (const api::ArtifactDiffLine& f : d->fields) names.push_back(f.field);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"checksum", "fabric_digest", "hash", "entropy"}));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("shape")));
  EXPECT_FALSE(d->paths.empty());  // the entropies differ wherever a set has several paths
  for (const api::ArtifactPathDiff& p : d->paths) {
    EXPECT_NE(p.installed, p.given);
    EXPECT_THAT(p.installed, HasSubstr("uplink"));
  }
  // A diff is no install: nothing published, nothing counted.
  EXPECT_EQ(pub.tables.size(), 1u);
  EXPECT_EQ(svc.State().installed->id, 1u);
  // An artifact this node cannot take is refused by diff too.
  EXPECT_THAT(svc.Diff(Bytes(HostSpec("pod-b"))).status().message(), HasSubstr("fwd.fabric"));
}

TEST(FwdService, PublishesThroughLbControlWhileAWorkerPolls) {
  absl::StatusOr<config::Config> cfg = config::LoadString(R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplink, vdev: net_ring1 }
  - { name: uplink1, role: uplink, vdev: net_ring2 }
fwd: { node: 10.0.0.5, fabric: pod-a }
)yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  absl::StatusOr<FwdService::Options> o = FwdService::OptionsFromConfig(*cfg);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->port_map, (std::vector<uint16_t>{1, 2}));
  lb::LbConfig params;
  params.balancer = lb::BalancerKind::kEcmp;
  params.pin = false;
  pipeline::LbControl ctl(params, nullptr, 1);
  o->publish = [&ctl](std::shared_ptr<const lb::PathTable> t) {
    return ctl.SetPathTable(std::move(t));
  };
  FwdService svc(*std::move(o));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> seen{0};
  std::thread worker([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      ctl.Quiescent(0);
      seen.store(ctl.params().generation, std::memory_order_relaxed);
    }
  });
  const uint64_t before = ctl.published_generation();
  const bool a = svc.Install(Bytes(HostSpec("pod-a", 1)), "a", false).ok();
  const bool b = svc.Install(Bytes(HostSpec("pod-a", 2)), "b", false).ok();
  const bool back = svc.Rollback(std::nullopt).ok();
  const pipeline::LbControl::Current now = ctl.current();
  stop = true;
  worker.join();
  ctl.Offline(0);
  ASSERT_TRUE(a && b && back);
  EXPECT_EQ(ctl.published_generation(), before + 3);
  EXPECT_EQ(seen.load(), now.generation);  // the worker read the last publication
  ASSERT_NE(now.table, nullptr);
  ExpectTableIs(*now.table, HostSpec("pod-a", 1), 5, {1, 2});
}

TEST(FwdService, CheckConfiguredArtifactResolvesRelativePaths) {
  char tmpl[] = "/tmp/heddle-fwd-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    const std::vector<uint8_t> b = Bytes(HostSpec());
    std::ofstream out(dir + "/host.nuwa", std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  auto load = [](const std::string& fwd) {
    return config::LoadString(absl::StrCat(R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplink, vdev: net_ring1 }
  - { name: uplink1, role: uplink, vdev: net_ring2 }
fwd: )yaml",
                                           fwd, "\n"));
  };
  absl::StatusOr<config::Config> c = load("{ node: \"host[5]\", artifact: host.nuwa }");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ResolveArtifactPath(dir + "/heddle.yaml", "host.nuwa"), dir + "/host.nuwa");
  EXPECT_EQ(ResolveArtifactPath(dir + "/heddle.yaml", "/x/y.nuwa"), "/x/y.nuwa");
  EXPECT_TRUE(CheckConfiguredArtifact(*c, dir + "/heddle.yaml").ok());
  c = load("{ node: \"host[5]\", artifact: host.nuwa, fabric: pod-z }");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status s = CheckConfiguredArtifact(*c, dir + "/heddle.yaml");
  EXPECT_THAT(s.message(), HasSubstr("fwd.artifact: artifact " + dir + "/host.nuwa is for fabric"));
  c = load("{ node: \"host[5]\", artifact: missing.nuwa }");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(CheckConfiguredArtifact(*c, dir + "/heddle.yaml").message(),
              HasSubstr("fwd.artifact: cannot read " + dir + "/missing.nuwa"));
  std::remove((dir + "/host.nuwa").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace heddle::heddled
