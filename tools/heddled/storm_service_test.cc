// StormService::Apply against concurrent auto cutoffs, and the storm config keys it relies on.
#include "tools/heddled/storm_service.h"

#include <atomic>
#include <thread>

#include "control/config/config.h"
#include "dataplane/pipeline/storm_control.h"
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
}  // namespace
}  // namespace heddle::heddled
