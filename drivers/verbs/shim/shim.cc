// File: drivers/verbs/shim/shim.cc
//
// The symbols libheddle_verbs_shim.so interposes when preloaded (LD_PRELOAD) into an rdma-core
// application: ibv_open_device wraps each new context (hooks.h), ibv_close_device forgets it,
// ibv_modify_qp records a QP's peer and ibv_destroy_qp retires its slot. All forward to
// libibverbs' own functions, found with dlvsym(RTLD_NEXT, name, "IBVERBS_1.1") — the version
// rdma-core's <infiniband/verbs.h> links against — or dlsym(RTLD_NEXT) where the next library has
// no such version. Everything else in the library is hidden.
//
// The shim's definitions are unversioned, so they bind every reference to these names; the
// IBVERBS_1.0 ABI (pre-2007 libibverbs binaries) is not supported.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>

#include "drivers/verbs/shim/hooks.h"

namespace {

template <typename Fn>
Fn Next(const char* name) {
  void* f = dlvsym(RTLD_NEXT, name, "IBVERBS_1.1");
  if (f == nullptr) f = dlsym(RTLD_NEXT, name);
  return reinterpret_cast<Fn>(f);
}

// Unlinks the table when the process exits normally (the mapping stays for running threads).
__attribute__((destructor)) void UnlinkAtExit() { heddle::verbs::shim::UnlinkProcessTable(); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) ibv_context* ibv_open_device(ibv_device* device) {
  using Fn = ibv_context* (*)(ibv_device*);
  static const Fn real = Next<Fn>("ibv_open_device");
  if (real == nullptr) {  // libibverbs is not loaded behind us
    errno = ENOSYS;
    return nullptr;
  }
  ibv_context* ctx = real(device);
  if (ctx != nullptr) heddle::verbs::shim::InstallOnContext(ctx);
  return ctx;
}

__attribute__((visibility("default"))) int ibv_close_device(ibv_context* ctx) {
  using Fn = int (*)(ibv_context*);
  static const Fn real = Next<Fn>("ibv_close_device");
  if (real == nullptr) return ENOSYS;
  heddle::verbs::shim::ForgetContext(ctx);
  return real(ctx);
}

__attribute__((visibility("default"))) int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr,
                                                         int attr_mask) {
  using Fn = int (*)(ibv_qp*, ibv_qp_attr*, int);
  static const Fn real = Next<Fn>("ibv_modify_qp");
  if (real == nullptr) return ENOSYS;
  const int rc = real(qp, attr, attr_mask);
  if (rc == 0) heddle::verbs::shim::OnQpModified(qp, attr, attr_mask);
  return rc;
}

__attribute__((visibility("default"))) int ibv_destroy_qp(ibv_qp* qp) {
  using Fn = int (*)(ibv_qp*);
  static const Fn real = Next<Fn>("ibv_destroy_qp");
  if (real == nullptr) return ENOSYS;
  // The provider frees `qp`: read what the slot is keyed by first.
  ibv_context* const ctx = qp != nullptr ? qp->context : nullptr;
  const uint32_t qpn = qp != nullptr ? qp->qp_num : 0;
  const int rc = real(qp);
  if (rc == 0 && ctx != nullptr) heddle::verbs::shim::OnQpDestroyed(ctx, qpn);
  return rc;
}

}  // extern "C"
