// heddle-nuwa end to end, in process: golden output for a k=4 fat tree (tools/heddle-nuwa/testdata,
// regenerate with HEDDLE_UPDATE_GOLDEN=1 after checking the change), compile -> artifacts ->
// query/show/diff from files, and exit codes and messages for bad input.
#include "tools/heddle-nuwa/nuwa_cli.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::nuwa::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kSource = HEDDLE_SOURCE_DIR;
const std::string kFt4 = kSource + "/deploy/examples/fabrics/fat-tree-k4.yaml";
const std::string kFt8 = kSource + "/deploy/examples/fabrics/fat-tree-k8-failures.yaml";
const std::string kTestdata = kSource + "/tools/heddle-nuwa/testdata";

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "heddle-nuwa");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int code = Main(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = kTestdata + "/" + name;
  if (std::getenv("HEDDLE_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, ReadFile(path)) << "golden file " << path;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("heddle_nuwa_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int next_ = 0;
};

TEST(HeddleNuwa, QuerySwitchGolden) {
  Result r = RunCli({"query", "--fabric", kFt4, "--node", "agg[0]", "--dst", "10.0.0.13"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_query_agg0.txt", r.out);
  r = RunCli({"query", "--fabric", kFt4, "--node", "agg[0]", "--dst", "10.0.0.13", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_query_agg0.json", r.out);
  // Down: the destination sits below tor[0].
  r = RunCli({"query", "--fabric", kFt4, "--node", "tor[0]", "--dst", "host[1]", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_query_tor0.json", r.out);
}

TEST(HeddleNuwa, QueryHostGolden) {
  Result r = RunCli({"query", "--fabric", kFt4, "--node", "host[0]", "--dst", "10.0.0.13"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_query_host0.txt", r.out);
  r = RunCli({"query", "--fabric", kFt4, "--node", "host[0]", "--dst", "fd00:4::d", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_query_host0.json", r.out);
}

TEST(HeddleNuwa, ShowNodeGolden) {
  Result r = RunCli({"show", "--fabric", kFt4, "--node", "agg[5]"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_show_agg5.txt", r.out);
  r = RunCli({"show", "--fabric", kFt4, "--node", "host[3]"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_show_host3.txt", r.out);
  r = RunCli({"show", "--fabric", kFt4, "--node", "core[2]", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ExpectGolden("ft4_show_core2.json", r.out);
}

TEST(HeddleNuwa, CompileThenReadArtifacts) {
  TempDir dir;
  Result r = RunCli({"compile", kFt4, "-o", dir.path()});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fabric ft4: fat-tree, 3 switch tiers, 1 plane, 16 hosts, 20 "
                               "switches"));
  EXPECT_THAT(r.out, HasSubstr("4 rules, 0 exceptions"));
  for (const char* f : {"tor.nuwa", "agg.nuwa", "core.nuwa", "host.nuwa"}) {
    EXPECT_TRUE(fs::exists(dir.path() + "/" + f)) << f;
  }
  // The artifacts answer as the fabric compiled in memory does.
  for (const char* node : {"agg[0]", "tor[0]", "core[3]", "host[0]"}) {
    for (const char* dst : {"10.0.0.13", "10.0.0.1", "10.0.0.0"}) {
      Result a = RunCli({"query", "--fabric", kFt4, "--node", node, "--dst", dst, "--json"});
      Result b =
          RunCli({"query", "--artifacts", dir.path(), "--node", node, "--dst", dst, "--json"});
      EXPECT_EQ(a.code, kExitOk) << a.err;
      EXPECT_EQ(b.code, kExitOk) << b.err;
      EXPECT_EQ(a.out, b.out) << node << " " << dst;
    }
  }
  r = RunCli({"show", dir.path() + "/agg.nuwa"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("switch role agg (tier 2) of fabric ft4"));
  EXPECT_THAT(r.out, HasSubstr("m = (2, 2, 4), w = (1, 2, 2)"));
  r = RunCli({"show", dir.path() + "/host.nuwa", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"entropy\":{\"2\":["));
  // The same fabric twice: no difference.
  r = RunCli({"diff", dir.path(), kFt4});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("role agg.nuwa: unchanged"));
}

// Destination-side failures (fat-tree-k8-failures.yaml): host[17]'s only link is down, so the
// host artifact says it is unreachable from every host, and each switch tier has one wildcard
// override for it instead of one override per switch.
TEST(HeddleNuwa, DestinationFailuresInArtifacts) {
  const std::string fabric = kSource + "/deploy/examples/fabrics/fat-tree-k8-failures.yaml";
  TempDir dir;
  Result r = RunCli({"compile", fabric, "-o", dir.path()});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("destination exceptions)"));
  r = RunCli({"show", dir.path() + "/host.nuwa"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("host[17]                     unreachable from every host"));
  r = RunCli({"show", dir.path() + "/tor.nuwa"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("every tor      0  host[17]"));
  r = RunCli({"query", "--artifacts", dir.path(), "--node", "host[3]", "--dst", "host[17]"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("unreachable"));
  r = RunCli({"verify", "--fabric", fabric});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(": 0 mismatches"));
  // Without the host link failure: no exception for host[17] any more.
  const std::string healed = dir.path() + "/healed.yaml";
  std::string text = ReadFile(fabric);
  const std::string line = "    - {node: \"host[17]\", up_port: 0}   # the host's only link\n";
  ASSERT_NE(text.find(line), std::string::npos);
  text.erase(text.find(line), line.size());
  std::ofstream(healed) << text;
  r = RunCli({"diff", fabric, healed});
  EXPECT_EQ(r.code, kExitDiffers) << r.err;
  EXPECT_THAT(r.out, HasSubstr("destination exception host[17]: unreachable from every host"));
  EXPECT_THAT(r.out, HasSubstr("override every tor -> host[17]: unreachable"));
}

TEST(HeddleNuwa, DiffShowsExceptions) {
  TempDir dir;
  const std::string degraded = dir.path() + "/ft4-degraded.yaml";
  std::ofstream(degraded) << ReadFile(kFt4) << "failures:\n  links: [\"agg[0]-core[1]\"]\n";
  Result r = RunCli({"diff", kFt4, degraded});
  EXPECT_EQ(r.code, kExitDiffers) << r.err;
  EXPECT_THAT(r.out, HasSubstr("role core.nuwa:"));
  EXPECT_THAT(r.out, HasSubstr("role agg.nuwa:"));
  EXPECT_THAT(r.out, HasSubstr("mask agg[0]"));
}

TEST(HeddleNuwa, VerifyAgreesWithTheOracle) {
  Result r = RunCli({"verify", "--fabric", kFt4});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified 576 of 576 (node, destination) pairs (all) against the "
                               "BFS oracle: 0 mismatches"));
  r = RunCli({"verify", "--fabric", kSource + "/deploy/examples/fabrics/leaf-spine.yaml",
              "--sample", "2000", "--seed", "7"});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("(sample, seed 7)"));
}

TEST(HeddleNuwa, BadInput) {
  TempDir dir, empty;
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string bad_yaml = dir.path() + "/bad.yaml";
  std::ofstream(bad_yaml) << "fabric:\n  name: t\n  kind: fat-tree\n  k: 5\n";
  const std::string corrupt = dir.path() + "/corrupt.nuwa";
  {
    TempDir out;
    ASSERT_EQ(RunCli({"compile", kFt4, "-o", out.path()}).code, kExitOk);
    std::string bytes = ReadFile(out.path() + "/agg.nuwa");
    bytes[bytes.size() - 9] ^= 0x40;
    std::ofstream(corrupt, std::ios::binary) << bytes;
  }
  const std::vector<Case> cases = {
      {{"compile", "/nonexistent/f.yaml", "-o", dir.path()}, "/nonexistent/f.yaml"},
      {{"compile", bad_yaml, "-o", dir.path()}, "bad.yaml:4:6: fabric.k: 5 is odd"},
      {{"query", "--fabric", kFt4, "--node", "agg[9]", "--dst", "10.0.0.1"},
       "agg index 9 out of range"},
      {{"query", "--fabric", kFt4, "--node", "spine[0]", "--dst", "10.0.0.1"},
       "unknown tier 'spine'"},
      {{"query", "--fabric", kFt4, "--node", "agg[0]", "--dst", "banana"},
       "--dst banana: not an IPv4 or IPv6 address or a host name"},
      {{"query", "--node", "agg[0]", "--dst", "10.0.0.1"}, "give --fabric FILE or --artifacts DIR"},
      {{"query", "--artifacts", empty.path(), "--node", "agg[0]", "--dst", "10.0.0.1"},
       "no *.nuwa artifacts"},
      {{"show", corrupt}, "corrupt.nuwa"},
      {{"show"}, "give an artifact file, or --node"},
      {{"frobnicate"}, "heddle-nuwa:"},
      {{"verify"}, "--fabric"},
  };
  for (const Case& c : cases) {
    Result r = RunCli(c.args);
    EXPECT_EQ(r.code, kExitBadInput) << c.args[0] << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args[0];
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(HeddleNuwa, NotInFabricAndLocal) {
  Result r = RunCli({"query", "--fabric", kFt4, "--node", "agg[0]", "--dst", "192.168.0.1"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "agg[0] -> 192.168.0.1 (no host of this fabric): not-in-fabric\n");
  r = RunCli({"query", "--fabric", kFt4, "--node", "host[5]", "--dst", "10.0.0.5"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "host[5] -> 10.0.0.5 (host[5]): local\n");
}

}  // namespace
}  // namespace heddle::nuwa::cli
