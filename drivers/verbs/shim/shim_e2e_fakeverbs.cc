// File: drivers/verbs/shim/shim_e2e_fakeverbs.cc
//
// A stand-in for libibverbs for shim_e2e_test, on a machine without an RDMA device: preloaded
// right after libheddle_verbs_shim.so, it is the "next" library the shim's dlvsym(RTLD_NEXT, ...,
// "IBVERBS_1.1") resolves (shim_e2e_fakeverbs.map gives its symbols that version, as libibverbs
// has). ibv_open_device returns a context whose provider ops accept every post; ibv_modify_qp
// fails with EINVAL for dest_qp_num kFakeFailQpn and otherwise succeeds, as rdma-core's does.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

namespace {

constexpr uint32_t kFakeFailQpn = 0xbad;
ibv_context g_ctx;

int FakePostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) { return 0; }
int FakePollCq(ibv_cq*, int, ibv_wc*) { return 0; }

}  // namespace

extern "C" {

ibv_context* ibv_open_device(ibv_device*) {
  std::memset(&g_ctx, 0, sizeof(g_ctx));
  g_ctx.cmd_fd = -1;
  g_ctx.async_fd = -1;
  g_ctx.ops.post_send = &FakePostSend;
  g_ctx.ops.poll_cq = &FakePollCq;
  return &g_ctx;
}

int ibv_close_device(ibv_context*) { return 0; }

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if ((attr_mask & IBV_QP_DEST_QPN) != 0 && attr->dest_qp_num == kFakeFailQpn) return EINVAL;
  if ((attr_mask & IBV_QP_STATE) != 0) qp->state = attr->qp_state;
  return 0;
}

int ibv_destroy_qp(ibv_qp*) { return 0; }

}  // extern "C"
