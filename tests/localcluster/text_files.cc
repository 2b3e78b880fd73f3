#include "tests/localcluster/text_files.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::localcluster {

absl::Status WriteTextFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  out.close();
  chmod(path.c_str(), mode);
  return absl::OkStatus();
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<long>(from), all.end(), "\n");
}

}  // namespace phalanx::localcluster
