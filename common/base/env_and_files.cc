#include "common/base/env_and_files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace phalanx::base {

std::optional<std::string> ProcessGetenv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": read error"));
  return buffer.str();
}

}  // namespace phalanx::base
