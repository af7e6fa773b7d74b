// File: drivers/verbs/shim/hooks.h
//
// The machinery behind libheddle_verbs_shim.so (shim.cc holds only the interposed symbols). On
// every context the application opens, InstallOnContext() swaps the provider's ops.post_send and
// ops.poll_cq for wrappers that call the provider and then account into the process's
// BacklogWriter (backlog_table.h). ibv_post_send() and ibv_poll_cq() are static inline in
// <infiniband/verbs.h> and dispatch through those very slots, which is why wrapping them sees every
// post and poll the application makes through the classic API.
//
//   ibv_context* ctx = real_ibv_open_device(dev);
//   if (ctx != nullptr) InstallOnContext(ctx);   // false: left untouched (pass-through)
//   ...
//   ForgetContext(ctx);                           // before the real ibv_close_device
//
// What is counted. post_send: the WRs the provider accepted (all on success, those before *bad_wr
// on error), one WQE and the sum of sg_list lengths each, on qp->qp_num. poll_cq: every returned
// completion on wc[i].qp_num (see backlog_table.h for how completed bytes are derived). Not seen:
// the extended APIs that bypass these slots (ibv_wr_* on ibv_qp_ex, ibv_start_poll on
// ibv_cq_ex) and provider direct-verbs (mlx5dv).
//
// Never crash the application: if the table cannot be created, one warning goes to stderr and
// contexts are left untouched. The wrappers take no lock and allocate nothing: the provider's
// originals sit in a fixed registry of kMaxContexts entries, published with release stores.
#pragma once

#include <string>

struct ibv_context;

namespace heddle::verbs::shim {

class BacklogWriter;

inline constexpr int kMaxContexts = 64;
inline constexpr char kShimDirEnv[] = "HEDDLE_VERBS_SHIM_DIR";  // default "/dev/shm"
inline constexpr char kShimCapacityEnv[] = "HEDDLE_VERBS_SHIM_CAPACITY";

// Wraps ctx's post_send and poll_cq. Creates the process's table on first use. Idempotent.
// Returns false, leaving ctx untouched, when there is no table or the registry is full.
bool InstallOnContext(ibv_context* ctx) noexcept;

// Restores ctx's original ops and frees its registry entry. No-op for unknown contexts.
void ForgetContext(ibv_context* ctx) noexcept;

// The process's table, created on first call from $HEDDLE_VERBS_SHIM_DIR (default /dev/shm)
// and $HEDDLE_VERBS_SHIM_CAPACITY; nullptr (after one warning) if that failed.
BacklogWriter* ProcessWriter() noexcept;

// Removes the process's table from the file system (the mapping stays, for threads still
// running). Called at exit.
void UnlinkProcessTable() noexcept;

}  // namespace heddle::verbs::shim
