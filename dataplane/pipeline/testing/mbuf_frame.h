// File: dataplane/pipeline/testing/mbuf_frame.h
//
// Puts a frame's bytes into an mbuf for the pipeline's tests:
//
//   rte_mbuf* m = rte_pktmbuf_alloc(pool);
//   ASSERT_NE(heddle::pipeline::test_util::AppendFrame(m, f.data(), f.size()), nullptr);
//
// In an AddressSanitizer build it also poisons the mbuf's data room past the frame. ASan does not
// track DPDK's memory, so without this a stage that read past data_len (a short frame, a chained
// mbuf's first segment) would read the room's stale bytes unnoticed. Elsewhere the poisoning
// macros are no-ops. An mbuf whose bytes are written any other way is not poisoned.
#pragma once

#include <rte_mbuf.h>
#include <sanitizer/asan_interface.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace heddle::pipeline::test_util {

// Appends `n` bytes of `src` to `m`; returns where they went, nullptr if they do not fit.
inline uint8_t* AppendFrame(rte_mbuf* m, const void* src, size_t n) {
  // The room may be poisoned from the mbuf's previous use.
  ASAN_UNPOISON_MEMORY_REGION(m->buf_addr, m->buf_len);
  auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(n)));
  if (p == nullptr) return nullptr;
  std::memcpy(p, src, n);
  const size_t end = size_t{m->data_off} + m->data_len;
  ASAN_POISON_MEMORY_REGION(static_cast<uint8_t*>(m->buf_addr) + end, m->buf_len - end);
  return p;
}

}  // namespace heddle::pipeline::test_util
