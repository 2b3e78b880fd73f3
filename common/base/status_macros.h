// Early-return helpers for absl::Status / absl::StatusOr, used across every library boundary.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PHALANX_CONCAT_INNER_(a, b) a##b
#define PHALANX_CONCAT_(a, b) PHALANX_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` from the enclosing function when not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status phalanx_status_ = (expr);           \
    if (!phalanx_status_.ok()) return phalanx_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): `lhs = *expr` when OK, otherwise returns the status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PHALANX_ASSIGN_OR_RETURN_IMPL_(PHALANX_CONCAT_(phalanx_statusor_, __LINE__), lhs, expr)

#define PHALANX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
