// File: tests/fuzz/replay_main.cc
//
// Replays fuzz inputs without libFuzzer, so the regression corpus runs in every (gcc) build:
// feeds each file named on the command line, or each regular file in a named directory, to
// LLVMFuzzerTestOneInput. A target signals a bug by aborting; reaching the end means all passed.
// Exits 1 when it found no input at all, so a missing corpus cannot pass silently.
//
//   pkt_parse_fuzz_replay tests/fuzz/corpus/pkt_parse [more files or directories...]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    const fs::path p(argv[i]);
    if (fs::is_directory(p, ec)) {
      for (const fs::directory_entry& e : fs::directory_iterator(p, ec)) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs to replay\n");
    return 1;
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // An exact-size heap copy, so an over-read shows up under ASan/valgrind like in libFuzzer.
    std::vector<uint8_t> buf(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(buf.empty() ? nullptr : buf.data(), buf.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
