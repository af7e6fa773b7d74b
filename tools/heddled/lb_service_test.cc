// LbService: the path table built from lb.paths, `show lb` before and after traffic, and `set lb`
// published while a worker polls (what `show config` then prints).
#include "tools/heddled/lb_service.h"

#include <atomic>
#include <thread>

#include "control/config/config.h"
#include "gtest/gtest.h"

namespace heddle::heddled {
namespace {

constexpr char kConfig[] = R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplink, vdev: net_ring1 }
  - { name: uplink1, role: uplink, vdev: net_ring2 }
lb:
  enabled: true
  balancer: reps
  pin: { threshold_bytes: 65536 }
  paths:
    default: { ports: [uplink0, uplink1], entropies: 2 }
    prefixes:
      - { prefix: 10.9.0.0/16, ports: [uplink1], values: [0xc100] }
)yaml";

config::Config Load() {
  absl::StatusOr<config::Config> c = config::LoadString(kConfig);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : config::Config{};
}

TEST(LbService, ShowsTheSetsAndParametersInForce) {
  config::Config cfg = Load();
  absl::StatusOr<std::unique_ptr<LbService>> svc = LbService::Create(cfg, 1);
  ASSERT_TRUE(svc.ok()) << svc.status();
  const api::LbView v = (*svc)->View();
  EXPECT_TRUE(v.enabled);
  EXPECT_EQ(v.balancer, "reps");
  EXPECT_TRUE(v.pin);
  EXPECT_EQ(v.threshold_bytes, 65536u);
  EXPECT_FALSE(v.threshold_auto);
  EXPECT_EQ(v.pin_policy, "hash");
  EXPECT_EQ(v.entropy, "udp-sport");
  EXPECT_FALSE(v.feedback_join);
  ASSERT_EQ(v.sets.size(), 2u);
  EXPECT_EQ(v.sets[0].prefix, "10.9.0.0/16");
  ASSERT_EQ(v.sets[0].paths.size(), 1u);
  EXPECT_EQ(v.sets[0].paths[0].port, "uplink1");
  EXPECT_EQ(v.sets[0].paths[0].entropy, 0xc100u);
  EXPECT_EQ(v.sets[1].prefix, "default");
  ASSERT_EQ(v.sets[1].paths.size(), 4u);
  EXPECT_EQ(v.sets[1].paths[2].port, "uplink1");
  EXPECT_EQ(v.sets[1].paths[2].entropy, 0xc000u);
  EXPECT_EQ(v.sets[1].jain_index, 0.0);  // nothing sent
  bool found = false;
  for (const api::LbCounterView& c : v.counters) found |= c.name == "join-no-index";
  EXPECT_TRUE(found);
}

TEST(LbService, SetLbPublishesWhileAWorkerPollsAndUpdatesTheConfig) {
  config::Config cfg = Load();
  absl::StatusOr<std::unique_ptr<LbService>> created = LbService::Create(cfg, 1);
  ASSERT_TRUE(created.ok()) << created.status();
  LbService& svc = **created;
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop) svc.control()->Quiescent(0);
  });
  api::LbUpdate u;
  u.balancer = "adaptive";
  u.threshold_auto = true;
  u.pin_policy = "least-loaded";
  ASSERT_TRUE(svc.Apply(u, &cfg.lb).ok());
  api::LbView v = svc.View();
  EXPECT_EQ(v.balancer, "adaptive");
  EXPECT_TRUE(v.threshold_auto);
  EXPECT_EQ(v.threshold_bytes, 100'000u);
  EXPECT_EQ(v.pin_policy, "least-loaded");
  EXPECT_EQ(v.generation, 2u);
  EXPECT_EQ(cfg.lb.params.balancer, lb::BalancerKind::kAdaptive);
  EXPECT_EQ(cfg.lb.params.threshold_bytes, 0u);
  EXPECT_NE(config::ToYaml(cfg).find("balancer: adaptive"), std::string::npos);

  // Refused whole, naming the key; nothing published.
  api::LbUpdate bad;
  bad.balancer = "spray";
  bad.pin = false;
  absl::Status s = svc.Apply(bad, &cfg.lb);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lb.balancer"), std::string::npos) << s;
  api::LbUpdate big;
  big.threshold_bytes = uint64_t{1} << 32;
  EXPECT_NE(svc.Apply(big, &cfg.lb).message().find("lb.pin.threshold_bytes"), std::string::npos);
  api::LbUpdate policy;
  policy.pin_policy = "random";
  EXPECT_NE(svc.Apply(policy, &cfg.lb).message().find("lb.pin.policy"), std::string::npos);
  EXPECT_EQ(svc.View().generation, 2u);
  EXPECT_TRUE(cfg.lb.params.pin);
  stop = true;
  worker.join();
  svc.WorkersStopped();
}

TEST(LbService, BadPathSetsFailAtStartUp) {
  config::Config cfg = Load();
  cfg.lb.default_paths.ports = {"host0"};
  absl::StatusOr<std::unique_ptr<LbService>> svc = LbService::Create(cfg, 1);
  ASSERT_FALSE(svc.ok());
  EXPECT_NE(svc.status().message().find("lb.paths.default.ports[0]"), std::string::npos)
      << svc.status();
}

}  // namespace
}  // namespace heddle::heddled
