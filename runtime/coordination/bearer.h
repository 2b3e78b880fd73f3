// The bearer credential every coordination call carries, on both transports: gRPC metadata
// `authorization: Bearer <credential>` and the wire hello's `authorization` field, the same
// text. <credential> is the job token or a task credential (token_auth.h checks which). Built by
// the clients (the C++ client's RPCs and sessions, the operator's coordinator link), parsed by
// the server. Pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace phalanx::coord {

inline constexpr char kAuthorizationHeader[] = "authorization";

inline std::string BearerCredential(absl::string_view credential) {
  return absl::StrCat("Bearer ", credential);
}

// The credential in "Bearer <credential>"; Unauthenticated ("<where> is not 'Bearer <token>'")
// for anything else.
inline absl::StatusOr<absl::string_view> ParseBearer(absl::string_view authorization,
                                                     absl::string_view where) {
  if (!absl::StartsWith(authorization, "Bearer ")) {
    return absl::UnauthenticatedError(absl::StrCat(where, " is not 'Bearer <token>'"));
  }
  return authorization.substr(7);
}

}  // namespace phalanx::coord
