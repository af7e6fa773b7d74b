// File: drivers/verbs/shim/shim.cc
//
// The symbols libheddle_verbs_shim.so interposes when preloaded (LD_PRELOAD) into an rdma-core
// application: ibv_open_device wraps each new context (hooks.h), ibv_close_device forgets it.
// Both forward to libibverbs' own functions, found with dlsym(RTLD_NEXT). Everything else in the
// library is hidden.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "drivers/verbs/shim/hooks.h"

namespace {

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
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

}  // extern "C"
