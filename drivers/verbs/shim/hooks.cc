// File: drivers/verbs/shim/hooks.cc
#include "drivers/verbs/shim/hooks.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "drivers/verbs/shim/backlog_table.h"

namespace heddle::verbs::shim {
namespace {

using PostSendFn = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
using PollCqFn = int (*)(ibv_cq*, int, ibv_wc*);

// One wrapped context. `post_send`/`poll_cq` are written before `ctx` is published with a
// release store and read after an acquire load of `ctx`, so a wrapper that finds its context
// also sees the originals. Entries are written only under g_install_mu.
struct ContextEntry {
  std::atomic<ibv_context*> ctx{nullptr};
  PostSendFn post_send = nullptr;
  PollCqFn poll_cq = nullptr;
};

ContextEntry g_contexts[kMaxContexts];
std::mutex g_install_mu;
// Published once; never destroyed (see BacklogWriter's class comment).
std::atomic<BacklogWriter*> g_writer{nullptr};
bool g_writer_attempted = false;  // under g_install_mu
bool g_full_warned = false;       // under g_install_mu

static_assert(kMaxContexts <= static_cast<int>(kMaxQpIdContexts));

const ContextEntry* Find(const ibv_context* ctx) {
  if (ctx == nullptr) return nullptr;  // free registry entries hold nullptr
  for (const ContextEntry& e : g_contexts) {
    if (e.ctx.load(std::memory_order_acquire) == ctx) return &e;
  }
  return nullptr;
}

// The table key of QP `qpn` on the context of registry entry `e` (see MakeQpId).
uint32_t QpId(const ContextEntry* e, uint32_t qpn) {
  return MakeQpId(static_cast<uint32_t>(e - g_contexts), qpn);
}

void Warn(const std::string& what) {
  std::fprintf(stderr,
               "heddle verbs shim (pid %d): %s; RDMA runs unmodified, without backlog "
               "accounting\n",
               static_cast<int>(getpid()), what.c_str());
}

int WrappedPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  const ContextEntry* e = Find(qp->context);
  if (e == nullptr || e->post_send == nullptr) {  // context forgotten: the app closed it
    if (bad_wr != nullptr) *bad_wr = wr;
    return EINVAL;
  }
  const int rc = e->post_send(qp, wr, bad_wr);
  BacklogWriter* w = g_writer.load(std::memory_order_acquire);
  if (w == nullptr || wr == nullptr) return rc;
  // On error only the WRs before *bad_wr were accepted. If *bad_wr is not in the list (a provider
  // bug), count nothing rather than guess.
  ibv_send_wr* stop = nullptr;
  if (rc != 0) {
    stop = bad_wr != nullptr ? *bad_wr : nullptr;
    bool found = false;
    for (ibv_send_wr* p = wr; p != nullptr; p = p->next) {
      if (p == stop) {
        found = true;
        break;
      }
    }
    if (!found || stop == wr) return rc;
  }
  BacklogSlot* slot = nullptr;
  try {
    slot = w->SlotFor(QpId(e, qp->qp_num));  // locks only to claim a slot
  } catch (const std::exception& ex) {       // std::mutex::lock may throw system_error
  }
  if (slot == nullptr) return rc;  // table full; counted in the header
  bool any_signaled = false;
  for (ibv_send_wr* p = wr; p != stop; p = p->next) {
    uint64_t bytes = 0;
    for (int i = 0; i < p->num_sge; ++i) bytes += p->sg_list[i].length;
    const bool signaled = (p->send_flags & IBV_SEND_SIGNALED) != 0;
    any_signaled |= signaled;
    slot->OnPosted(bytes, signaled);
  }
  if (any_signaled) slot->SettleAfterPost();
  return rc;
}

int WrappedPollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  const ContextEntry* e = Find(cq->context);
  if (e == nullptr || e->poll_cq == nullptr) return -1;
  const int n = e->poll_cq(cq, num_entries, wc);
  BacklogWriter* w = g_writer.load(std::memory_order_acquire);
  if (w == nullptr || n <= 0) return n;
  BacklogSlot* slot = nullptr;
  uint32_t slot_qpn = 0;
  for (int i = 0; i < n; ++i) {
    if (slot == nullptr || wc[i].qp_num != slot_qpn) {
      slot_qpn = wc[i].qp_num;
      slot = w->FindSlot(QpId(e, slot_qpn));
      if (slot == nullptr) continue;  // never posted a send: receive-only QP
    }
    const bool success = wc[i].status == IBV_WC_SUCCESS;
    slot->OnCompletion(success, success && (wc[i].opcode & IBV_WC_RECV) == 0);
  }
  return n;
}

BacklogWriter* EnsureWriterLocked() {
  if (g_writer_attempted) return g_writer.load(std::memory_order_relaxed);
  g_writer_attempted = true;
  const char* dir = std::getenv(kShimDirEnv);
  if (dir == nullptr || *dir == '\0') dir = "/dev/shm";
  uint32_t capacity = kDefaultCapacity;
  if (const char* c = std::getenv(kShimCapacityEnv); c != nullptr && *c != '\0') {
    if (!absl::SimpleAtoi(c, &capacity) || capacity == 0 || capacity > kMaxCapacity) {
      Warn(std::string(kShimCapacityEnv) + "=" + c + " is not a slot count in 1.." +
           std::to_string(kMaxCapacity));
      return nullptr;
    }
  }
  absl::StatusOr<std::unique_ptr<BacklogWriter>> w =
      BacklogWriter::Create(BacklogWriter::PathFor(dir, getpid()), capacity);
  if (!w.ok()) {
    Warn(std::string(w.status().message()));
    return nullptr;
  }
  BacklogWriter* raw = w->release();  // lives until the process ends
  g_writer.store(raw, std::memory_order_release);
  return raw;
}

}  // namespace

BacklogWriter* ProcessWriter() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_install_mu);
    return EnsureWriterLocked();
  } catch (const std::exception& e) {
    return nullptr;
  }
}

bool InstallOnContext(ibv_context* ctx) noexcept {
  if (ctx == nullptr) return false;
  try {
    std::lock_guard<std::mutex> lock(g_install_mu);
    if (EnsureWriterLocked() == nullptr) return false;
    if (ctx->ops.post_send == &WrappedPostSend || ctx->ops.poll_cq == &WrappedPollCq) {
      return true;  // already wrapped
    }
    ContextEntry* slot = nullptr;
    for (ContextEntry& e : g_contexts) {
      ibv_context* c = e.ctx.load(std::memory_order_relaxed);
      // Same address as a context closed without ForgetContext: the memory was reused.
      if (c == ctx) {
        slot = &e;
        break;
      }
      if (c == nullptr && slot == nullptr) slot = &e;
    }
    if (slot == nullptr) {
      if (!g_full_warned) {
        g_full_warned = true;
        Warn("more than " + std::to_string(kMaxContexts) + " open device contexts");
      }
      return false;
    }
    slot->ctx.store(nullptr, std::memory_order_relaxed);
    slot->post_send = ctx->ops.post_send;
    slot->poll_cq = ctx->ops.poll_cq;
    slot->ctx.store(ctx, std::memory_order_release);
    // The context was just opened; no other thread uses it yet.
    if (slot->post_send != nullptr) ctx->ops.post_send = &WrappedPostSend;
    if (slot->poll_cq != nullptr) ctx->ops.poll_cq = &WrappedPollCq;
    return true;
  } catch (const std::exception& e) {
    return false;
  }
}

void ForgetContext(ibv_context* ctx) noexcept {
  if (ctx == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(g_install_mu);
    for (ContextEntry& e : g_contexts) {
      if (e.ctx.load(std::memory_order_relaxed) != ctx) continue;
      if (ctx->ops.post_send == &WrappedPostSend) ctx->ops.post_send = e.post_send;
      if (ctx->ops.poll_cq == &WrappedPollCq) ctx->ops.poll_cq = e.poll_cq;
      e.ctx.store(nullptr, std::memory_order_release);
    }
  } catch (const std::exception& e) {
  }
}

void OnQpModified(const ibv_qp* qp, const ibv_qp_attr* attr, int attr_mask) noexcept {
  if (qp == nullptr || attr == nullptr) return;
  BacklogWriter* w = g_writer.load(std::memory_order_acquire);
  // Only QPs whose posts are counted: a peer without counters would only take a slot.
  const ContextEntry* e = Find(qp->context);
  if (w == nullptr || e == nullptr) return;
  const uint32_t id = QpId(e, qp->qp_num);
  try {
    if ((attr_mask & IBV_QP_STATE) != 0 && attr->qp_state == IBV_QPS_RESET) w->ResetQp(id);
    QpPeer peer;
    if ((attr_mask & IBV_QP_DEST_QPN) != 0) peer.dest_qpn = attr->dest_qp_num;
    if ((attr_mask & IBV_QP_AV) != 0) {
      if (attr->ah_attr.is_global != 0) {
        std::array<uint8_t, 16> gid;
        std::memcpy(gid.data(), attr->ah_attr.grh.dgid.raw, gid.size());
        peer.dgid = gid;
      } else {
        peer.clear_dgid = true;  // LID-routed (InfiniBand without GRH): no address to key on
      }
    }
    if (peer.dest_qpn.has_value() || peer.dgid.has_value() || peer.clear_dgid) {
      w->RecordPeer(id, peer);  // false: table full, counted in the header
    }
  } catch (const std::exception& e) {  // std::mutex::lock may throw system_error
  }
}

void OnQpDestroyed(const ibv_context* ctx, uint32_t qpn) noexcept {
  BacklogWriter* w = g_writer.load(std::memory_order_acquire);
  // A context already forgotten (closed before its QPs were destroyed, which verbs forbids) has
  // lost its index; its slots keep their last counters.
  const ContextEntry* e = Find(ctx);
  if (w == nullptr || e == nullptr) return;
  try {
    w->RetireQp(QpId(e, qpn));
  } catch (const std::exception& ex) {
  }
}

void UnlinkProcessTable() noexcept {
  if (BacklogWriter* w = g_writer.load(std::memory_order_acquire)) w->Unlink();
}

}  // namespace heddle::verbs::shim
