// File: common/status_macros.h
//
// Project-prefixed helpers for absl::Status plumbing off the hot path (Abseil 20220623 ships none).
//
//   HEDDLE_RETURN_IF_ERROR(DoThing());
//   HEDDLE_ASSIGN_OR_RETURN(auto cfg, LoadConfig(path));
//
// Never use these on the per-packet path: it returns counts and drop reasons, not Status.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HEDDLE_INTERNAL_CONCAT_(a, b) a##b
#define HEDDLE_INTERNAL_CONCAT(a, b) HEDDLE_INTERNAL_CONCAT_(a, b)

#define HEDDLE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status heddle_status_ = (expr);          \
    if (!heddle_status_.ok()) return heddle_status_; \
  } while (0)

#define HEDDLE_INTERNAL_ASSIGN_OR_RETURN(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).status();         \
  lhs = std::move(tmp).value()

#define HEDDLE_ASSIGN_OR_RETURN(lhs, expr) \
  HEDDLE_INTERNAL_ASSIGN_OR_RETURN(HEDDLE_INTERNAL_CONCAT(heddle_statusor_, __LINE__), lhs, expr)
