#include "common/auth/credentials.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace phalanx::auth {
namespace {

constexpr absl::string_view kTaskPrefix = "task.";
constexpr absl::string_view kSparePrefix = "spare.";

// "<prefix><n>.<hex>" → n when the whole of it is `derive(n)`; -1 otherwise. Constant time in
// the credential's bytes.
template <typename Derive>
int NumberedCredential(absl::string_view presented, absl::string_view prefix, Derive derive) {
  absl::string_view rest = presented;
  if (!absl::ConsumePrefix(&rest, prefix)) return -1;
  const size_t dot = rest.find('.');
  int n = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &n) || n < 0) {
    return -1;
  }
  return ConstantTimeEquals(derive(n), presented) ? n : -1;
}

// "task.<id>.<lo>-<hi>.<hex>" → the principal when the whole of it is TaskCredential(id, lo, hi).
std::optional<Principal> BoundTaskCredential(absl::string_view job_token,
                                             absl::string_view presented) {
  absl::string_view rest = presented;
  if (!absl::ConsumePrefix(&rest, kTaskPrefix)) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(rest, absl::MaxSplits('.', 2));
  if (parts.size() != 3) return std::nullopt;
  const size_t dash = parts[1].find('-');
  int task = -1;
  int64_t lo = -1, hi = -1;
  if (dash == absl::string_view::npos || !absl::SimpleAtoi(parts[0], &task) || task < 0 ||
      !absl::SimpleAtoi(parts[1].substr(0, dash), &lo) ||
      !absl::SimpleAtoi(parts[1].substr(dash + 1), &hi) || lo < 0 || hi < lo) {
    return std::nullopt;
  }
  if (!ConstantTimeEquals(TaskCredential(job_token, task, lo, hi), presented)) return std::nullopt;
  Principal principal{task};
  principal.min_incarnation = lo;
  principal.max_incarnation = hi;
  return principal;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), n));
}

}  // namespace

std::string HmacSha256Hex(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return Hex(out, len);
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr);
  return Hex(out, len);
}

std::string RandomHex(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  // Without entropy no credential is safe: crash loudly rather than hand out a guessable one.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), bytes) != 1) std::abort();
  return absl::BytesToHexString(raw);
}

std::string JobToken(absl::string_view operator_key, absl::string_view ns, absl::string_view name,
                     absl::string_view uid) {
  return HmacSha256Hex(operator_key, absl::StrCat("phalanx/job/v1/", ns, "/", name, "/", uid));
}

std::string TaskCredential(absl::string_view job_token, int task_id) {
  return absl::StrCat(kTaskPrefix, task_id, ".",
                      HmacSha256Hex(job_token, absl::StrCat("phalanx/task/v1/", task_id)));
}

std::string TaskCredential(absl::string_view job_token, int task_id, int64_t lo, int64_t hi) {
  return absl::StrCat(
      kTaskPrefix, task_id, ".", lo, "-", hi, ".",
      HmacSha256Hex(job_token, absl::StrCat("phalanx/task/v2/", task_id, "/", lo, "/", hi)));
}

std::string SpareCredential(absl::string_view job_token, int slot) {
  return absl::StrCat(kSparePrefix, slot, ".",
                      HmacSha256Hex(job_token, absl::StrCat("phalanx/spare/v1/", slot)));
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = i < b.size() ? b[i] : 0;
    diff |= static_cast<unsigned char>(c ^ a[i]);
  }
  return diff == 0;
}

absl::StatusOr<Principal> Authenticate(absl::string_view job_token, absl::string_view presented) {
  if (job_token.empty()) return absl::UnauthenticatedError("no job token configured");
  if (ConstantTimeEquals(job_token, presented)) return Principal{};
  if (std::optional<Principal> task = BoundTaskCredential(job_token, presented)) return *task;
  if (int task = NumberedCredential(presented, kTaskPrefix,
                                    [&](int n) { return TaskCredential(job_token, n); });
      task >= 0) {
    return Principal{task};
  }
  if (int slot = NumberedCredential(presented, kSparePrefix,
                                    [&](int n) { return SpareCredential(job_token, n); });
      slot >= 0) {
    return Principal{Principal::kNoTask, slot};
  }
  return absl::UnauthenticatedError("wrong job token or task credential");
}

}  // namespace phalanx::auth
