// File: drivers/verbs/shim/shim_e2e_probe.cc
//
// A plain rdma-core program for shim_e2e_test: lists the RDMA devices, opens and closes each one,
// and prints which library ibv_open_device resolves to (the shim when it is preloaded).
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstdio>

int main() {
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  std::printf("devices: %d\n", list != nullptr ? num : -1);
  for (int i = 0; list != nullptr && i < num; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    std::printf("open %s: %s\n", ibv_get_device_name(list[i]), ctx != nullptr ? "ok" : "failed");
    if (ctx != nullptr) ibv_close_device(ctx);
  }
  if (list != nullptr) ibv_free_device_list(list);
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "ibv_open_device");
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    std::printf("ibv_open_device from: %s\n", info.dli_fname);
  }
  return 0;
}
