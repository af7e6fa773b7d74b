// File: drivers/verbs/shim/hooks.h
//
// The machinery behind libheddle_verbs_shim.so (shim.cc holds only the interposed symbols). On
// every context the application opens, InstallOnContext() swaps the provider's ops.post_send and
// ops.poll_cq for wrappers that call the provider and then account into the process's
// BacklogWriter (backlog_table.h). ibv_post_send() and ibv_poll_cq() are static inline in
// <infiniband/verbs.h> and dispatch through those very slots, which is why wrapping them sees every
// post and poll the application makes through the classic API. ibv_modify_qp() and
// ibv_destroy_qp() are exported functions that dispatch through libibverbs' private provider ops,
// so shim.cc interposes the symbols themselves and reports each successful call here.
//
//   ibv_context* ctx = real_ibv_open_device(dev);
//   if (ctx != nullptr) InstallOnContext(ctx);   // false: left untouched (pass-through)
//   if (real_ibv_modify_qp(qp, attr, mask) == 0) OnQpModified(qp, attr, mask);
//   ibv_context* c = qp->context; uint32_t qpn = qp->qp_num;   // qp is freed by the destroy
//   if (real_ibv_destroy_qp(qp) == 0) OnQpDestroyed(c, qpn);
//   ...
//   ForgetContext(ctx);                           // before the real ibv_close_device
//
// What is counted. post_send: the WRs the provider accepted (all on success, those before *bad_wr
// on error), one WQE and the sum of sg_list lengths each, on qp->qp_num. poll_cq: every returned
// completion on wc[i].qp_num (see backlog_table.h for how completed bytes are derived).
// modify_qp: the peer — IBV_QP_DEST_QPN gives the remote QPN, IBV_QP_AV with ah_attr.is_global
// the remote GID (for RoCEv2 its IP address, IPv4 as ::ffff:a.b.c.d) — and a transition to RESET,
// which discards the QP's queued WRs. destroy_qp: the QP is gone; its slot stops reporting it.
// Not seen: the extended APIs that bypass these slots (ibv_wr_* on ibv_qp_ex, ibv_start_poll on
// ibv_cq_ex), provider direct-verbs (mlx5dv), and applications that dlopen() libibverbs and look
// its functions up by handle (dlsym/dlvsym on that handle skips the preloaded shim).
//
// Never crash the application: if the table cannot be created, one warning goes to stderr and
// contexts are left untouched. The post/poll wrappers allocate nothing and take no lock, except
// the first post on a QP that has no slot yet (one whose connection the shim did not see), which
// claims one under the table's claim mutex. The provider's originals sit in a fixed registry of
// kMaxContexts entries, published with release stores.
#pragma once

#include <cstdint>
#include <string>

struct ibv_context;
struct ibv_qp;
struct ibv_qp_attr;

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

// After a successful ibv_modify_qp(qp, attr, attr_mask) on a QP of a wrapped context: records the
// peer parts present in attr_mask in the QP's slot (claiming it), and settles the slot when the QP
// moved to RESET. No-op for contexts the shim does not account for.
void OnQpModified(const ibv_qp* qp, const ibv_qp_attr* attr, int attr_mask) noexcept;

// After a successful ibv_destroy_qp of QP `qpn` (read before the call: the call frees the QP):
// settles and retires its slot, so its QPN, once reused, starts afresh.
void OnQpDestroyed(const ibv_context* ctx, uint32_t qpn) noexcept;

// The process's table, created on first call from $HEDDLE_VERBS_SHIM_DIR (default /dev/shm)
// and $HEDDLE_VERBS_SHIM_CAPACITY; nullptr (after one warning) if that failed.
BacklogWriter* ProcessWriter() noexcept;

// Removes the process's table from the file system (the mapping stays, for threads still
// running). Called at exit.
void UnlinkProcessTable() noexcept;

}  // namespace heddle::verbs::shim
