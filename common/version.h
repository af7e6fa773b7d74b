// File: common/version.h
//
// The one place the project's version string lives; binaries print it and the control API reports
// it.
#pragma once

namespace heddle {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace heddle
