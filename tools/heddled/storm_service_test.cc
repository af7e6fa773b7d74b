// StormService::Apply against concurrent auto cutoffs, the storm config keys it relies on, and the
// host shim's pairs as `show storm` reports them.
#include "tools/heddled/storm_service.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "control/config/config.h"
#include "dataplane/pipeline/storm_control.h"
#include "drivers/verbs/host_backlog.h"
#include "drivers/verbs/shim/backlog_table.h"
#include "gtest/gtest.h"

namespace heddle::heddled {
namespace {

constexpr char kMinimal[] = R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplink, vdev: net_ring1 }
)yaml";

// Guards against: `storm.cutoffs: auto` with more than 4 levels is refused at start-up (the static
// default ladder has only 3 non-zero cutoffs and is validated even though auto replaces it).
TEST(StormServiceConfig, AutoCutoffsWithSixLevelsLoads) {
  absl::StatusOr<config::Config> c = config::LoadString(
      std::string(kMinimal) + "storm: { enabled: true, levels: 6, cutoffs: auto }\n");
  EXPECT_TRUE(c.ok()) << c.status();
}

// Guards against: Apply() publishes the levels and then, separately, stores the auto flag. An
// AutoStep running between the two (it was blocked on StormControl::mu_ during SetLevels' grace
// period) still sees auto on and replaces the operator's static cutoffs.
TEST(StormServiceApply, ExplicitCutoffsAreNotOverwrittenByAConcurrentAutoStep) {
  config::StormConfig cfg;
  cfg.enabled = true;
  cfg.auto_cutoffs = true;
  StormService svc(cfg, 1);
  pipeline::StormControl* ctl = svc.control();
  // Requests of ~1 MiB only: auto cutoffs land far from the explicit ones below.
  for (int i = 0; i < 1000; ++i) ctl->histogram(0)->Add(1u << 20);
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop) ctl->Quiescent(0);
  });
  std::thread autostep([&] {
    while (!stop) {
      for (int i = 0; i < 10; ++i) ctl->histogram(0)->Add((1u << 20) + (i << 12));
      ctl->AutoStep(0.0);
    }
  });
  int lost = 0, tries = 0;
  for (; tries < 3000 && lost == 0; ++tries) {
    // back to auto
    api::StormUpdate a;
    a.cutoffs_auto = true;
    ASSERT_TRUE(svc.Apply(a, nullptr).ok());
    api::StormUpdate u;
    u.cutoffs = std::vector<uint64_t>{1000 + static_cast<uint64_t>(tries % 7), 2000, 3000};
    config::StormConfig out = cfg;
    ASSERT_TRUE(svc.Apply(u, &out).ok());
    // Apply returned OK: the operator's cutoffs are in force, auto is off.
    const storm::LevelConfig now = ctl->current_levels();
    if (!ctl->auto_cutoffs() && now.cutoffs[1] != 2000) ++lost;
  }
  stop = true;
  worker.join();
  autostep.join();
  EXPECT_EQ(lost, 0) << "after " << tries << " set storm cutoffs: auto off but the cutoffs in "
                     << "force are not the ones set";
}

}  // namespace
}  // namespace heddle::heddled

namespace heddle::heddled {
namespace {
// Guards against: CutoffsFor's fallback ladder (x16 from 4 KiB, clamped at 2^31) repeats 2^31 for K
// = 8, so `set storm levels 8 --cutoffs auto` fails validation before any size was observed.
TEST(StormServiceApply, EightLevelsWithAutoCutoffsBeforeAnyTraffic) {
  config::StormConfig cfg;
  cfg.enabled = true;
  StormService svc(cfg, 1);
  svc.WorkersStopped();  // no worker polls in this test
  api::StormUpdate u;
  u.levels = 8;
  u.cutoffs_auto = true;
  absl::Status s = svc.Apply(u, nullptr);
  EXPECT_TRUE(s.ok()) << s;
}
// `set storm unknown-size` publishes the size in force and records it in the config that `show
// config` prints; the view reports it.
TEST(StormServiceApply, UnknownSizeIsPublishedAndShown) {
  config::StormConfig cfg;
  cfg.enabled = true;
  StormService svc(cfg, 1);
  svc.WorkersStopped();  // no worker polls in this test
  EXPECT_EQ(svc.control()->current_levels().unknown_size, storm::kUnknownSizeLowest);
  api::StormUpdate u;
  u.unknown_size = 256 * 1024;
  config::StormConfig out = cfg;
  ASSERT_TRUE(svc.Apply(u, &out).ok());
  EXPECT_EQ(svc.control()->current_levels().unknown_size, 256u * 1024);
  EXPECT_EQ(out.levels.unknown_size, 256u * 1024);
  EXPECT_EQ(svc.View(pipeline::StatsSnapshot{}).unknown_size, 256u * 1024);
  // Zero is refused by the level validation, naming the key; nothing changes.
  u.unknown_size = 0;
  const absl::Status s = svc.Apply(u, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("storm.unknown_size"), std::string::npos) << s;
  EXPECT_EQ(svc.control()->current_levels().unknown_size, 256u * 1024);
}

// The storm thread's HostTick publishes the index with its (peer, local QPN) pairs, and `show
// storm` counts them, ambiguous ones apart.
TEST(StormServiceHost, HostTickPublishesPairsAndShowStormCountsThem) {
  char tmpl[] = "/tmp/heddle-storm-service-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto w =
        verbs::shim::BacklogWriter::Create(verbs::shim::BacklogWriter::PathFor(dir, getpid()), 64);
    ASSERT_TRUE(w.ok()) << w.status();
    const std::array<uint8_t, 16> peer = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    ASSERT_TRUE((*w)->RecordPeer(0x10, {.dest_qpn = 0x500, .dgid = peer}));
    ASSERT_TRUE((*w)->RecordPeer(0x11, {.dest_qpn = 0x501, .dgid = peer}));
    // The same local QPN on a second device context, to another QP of the same peer: ambiguous.
    ASSERT_TRUE(
        (*w)->RecordPeer(verbs::shim::MakeQpId(1, 0x11), {.dest_qpn = 0x502, .dgid = peer}));
    config::StormConfig cfg;
    cfg.enabled = true;
    cfg.backlog_source = storm::BacklogSource::kHostShim;
    cfg.host_backlog_dir = dir;
    StormService svc(cfg, 1);
    svc.HostTick();
    const verbs::HostBacklogIndex* index = svc.control()->host_backlog();
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->PairedDestQpn(peer, 0x10), 0x500u);
    EXPECT_EQ(index->PairedDestQpn(peer, 0x11), verbs::HostBacklogIndex::kNoPair);
    const api::StormView v = svc.View(pipeline::StatsSnapshot{});
    EXPECT_EQ(v.host_qps, 3u);
    EXPECT_EQ(v.host_pairs, 2u);
    EXPECT_EQ(v.host_ambiguous_pairs, 1u);
    EXPECT_EQ(v.resp_joined_local, 0u);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace heddle::heddled
