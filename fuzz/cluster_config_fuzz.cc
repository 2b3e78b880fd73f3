// Fuzz target: kubeconfig YAML (ParseKubeconfig) and the in-cluster service-account config
// (InClusterConfig). The first byte picks which: even → kubeconfig (pieces: YAML, context
// name), odd → in-cluster (pieces: KUBERNETES_SERVICE_HOST, _PORT, token, ca.crt, namespace,
// written to a scratch service-account directory). A kubeconfig naming a device or /proc file
// is skipped: reading /dev/zero would never end, which is the file's owner's doing, not a parser
// bug.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/kube/cluster_config.h"
#include "fuzz/fuzz_input.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "phalanx-fuzz-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) abort();
    return tmpl;
  }();
  return dir;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using phalanx::fuzz::PieceOr;
  if (size == 0) return 0;
  const bool in_cluster = data[0] & 1;
  const auto pieces = phalanx::fuzz::Pieces(data + 1, size - 1, in_cluster ? 5 : 2);
  if (!in_cluster) {
    const std::string& yaml = pieces[0];
    if (yaml.find("/dev/") != std::string::npos || yaml.find("/proc/") != std::string::npos) {
      return 0;
    }
    auto config = phalanx::kube::ParseKubeconfig(yaml, ScratchDir(), PieceOr(pieces, 1));
    if (config.ok()) {
      PHALANX_FUZZ_CHECK(config->server.rfind("https://", 0) == 0 ||
                         config->server.rfind("http://", 0) == 0);
    }
    return 0;
  }
  const std::string dir = ScratchDir();
  Write(dir + "/token", PieceOr(pieces, 2));
  Write(dir + "/ca.crt", PieceOr(pieces, 3));
  Write(dir + "/namespace", PieceOr(pieces, 4));
  auto getenv = [&](const std::string& name) -> std::optional<std::string> {
    if (name == "KUBERNETES_SERVICE_HOST") return pieces[0];
    if (name == "KUBERNETES_SERVICE_PORT") return PieceOr(pieces, 1);
    return std::nullopt;
  };
  auto config = phalanx::kube::InClusterConfig(getenv, dir);
  if (config.ok()) PHALANX_FUZZ_CHECK(config->server.rfind("https://", 0) == 0);
  return 0;
}
