// Per-job token check for every coordination call: the client sends
// `authorization: Bearer <token>` metadata; anything else is Unauthenticated.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "absl/status/status.h"

namespace phalanx::coord {

inline constexpr char kAuthorizationHeader[] = "authorization";

// Compares in constant time so the token cannot be guessed byte by byte from timings.
absl::Status CheckToken(const grpc::CallbackServerContext& ctx, const std::string& token);

}  // namespace phalanx::coord
