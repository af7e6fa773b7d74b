// File: drivers/verbs/shim/shim_e2e_qp_probe.cc
//
// A plain rdma-core program for shim_e2e_test, run with libheddle_verbs_shim.so and the fake
// provider library (shim_e2e_fakeverbs.cc) preloaded: it opens a device, connects an RC QP to
// ::ffff:192.0.2.7 QPN 0x5678 through ibv_modify_qp (then tries a modify the provider rejects),
// posts 4096 bytes, destroys the QP. After each step it copies the shim's table
// ($HEDDLE_VERBS_SHIM_DIR/heddle-verbs-<pid>) to $HEDDLE_E2E_OUT/<step> for the test to read.
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

void Snapshot(const char* step) {
  const std::string table = std::string(std::getenv("HEDDLE_VERBS_SHIM_DIR")) + "/heddle-verbs-" +
                            std::to_string(getpid());
  const std::string out = std::string(std::getenv("HEDDLE_E2E_OUT")) + "/" + step;
  std::error_code ec;
  std::filesystem::copy_file(table, out, ec);
  std::printf("snapshot %s: %s\n", step, ec ? ec.message().c_str() : "ok");
}

const char* LibraryOf(const char* symbol) {
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, symbol);
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

}  // namespace

int main() {
  if (std::getenv("HEDDLE_VERBS_SHIM_DIR") == nullptr || std::getenv("HEDDLE_E2E_OUT") == nullptr) {
    std::fprintf(stderr, "set HEDDLE_VERBS_SHIM_DIR and HEDDLE_E2E_OUT\n");
    return 2;
  }
  std::printf("ibv_modify_qp from: %s\n", LibraryOf("ibv_modify_qp"));
  std::printf("ibv_destroy_qp from: %s\n", LibraryOf("ibv_destroy_qp"));
  ibv_context* ctx = ibv_open_device(nullptr);
  if (ctx == nullptr) return 3;

  ibv_qp qp{};
  qp.context = ctx;
  qp.qp_num = 0x1234;
  qp.qp_type = IBV_QPT_RC;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.dest_qp_num = 0x5678;
  attr.ah_attr.is_global = 1;
  const unsigned char dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
  std::memcpy(attr.ah_attr.grh.dgid.raw, dgid, sizeof(dgid));
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN;
  std::printf("modify rtr: %d\n", ibv_modify_qp(&qp, &attr, mask));
  ibv_qp_attr rejected = attr;
  rejected.dest_qp_num = 0xbad;
  std::printf("modify rejected: %d\n", ibv_modify_qp(&qp, &rejected, mask));

  ibv_sge sge{0x1000, 4096, 0x42};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr* bad = nullptr;
  std::printf("post: %d\n", ibv_post_send(&qp, &wr, &bad));
  Snapshot("connected");

  std::printf("destroy: %d\n", ibv_destroy_qp(&qp));
  Snapshot("destroyed");
  ibv_close_device(ctx);
  return 0;
}
