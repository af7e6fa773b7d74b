// File: dataplane/storm/rewrite.cc
#include "dataplane/storm/rewrite.h"

#include "dataplane/pkt/roce.h"

namespace heddle::storm {

bool SetPcp(uint8_t* frame, const pkt::PacketDesc& desc, int pcp) {
  if (desc.num_vlans == 0 || pcp < 0 || pcp > 7) return false;
  // Outermost tag: TPID at bytes 12-13, TCI at 14-15; PCP is the TCI's top 3 bits.
  uint8_t* tci = frame + 2 * 6 + 2;
  tci[0] = static_cast<uint8_t>((tci[0] & 0x1f) | pcp << 5);
  return true;
}

}  // namespace heddle::storm
