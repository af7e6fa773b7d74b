// File: dataplane/fwd/crc32c.h
//
// The artifacts' CRC-32C, now common/crc32c.h (GeoMesh relay frames carry the same checksum);
// this name stays so fwd code and its tests read as before.
#pragma once

#include "common/crc32c.h"

namespace heddle::fwd {

using ::heddle::Crc32c;

}  // namespace heddle::fwd
