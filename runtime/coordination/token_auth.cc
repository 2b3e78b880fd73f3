#include "runtime/coordination/token_auth.h"

namespace phalanx::coord {

absl::Status CheckToken(const grpc::CallbackServerContext& ctx, const std::string& token) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kAuthorizationHeader);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing job token (authorization metadata)");
  }
  const std::string expected = "Bearer " + token;
  const grpc::string_ref& got = it->second;
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char c = i < got.size() ? got.data()[i] : 0;
    diff |= static_cast<unsigned char>(c ^ expected[i]);
  }
  if (diff != 0) return absl::UnauthenticatedError("wrong job token");
  return absl::OkStatus();
}

}  // namespace phalanx::coord
