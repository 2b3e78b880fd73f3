#include "node_agent/gpu/fake_xid_script.h"

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"

namespace phalanx::agent {

int FakeXidScript::Poll() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return 0;  // nothing scripted yet
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < consumed_) {
    PHX_LOG(WARNING) << "--fake_xid_file " << path_ << " shrank; reading it from the start";
    consumed_ = 0;
  }
  in.seekg(static_cast<std::streamoff>(consumed_));
  std::string added((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t complete = added.rfind('\n');
  if (complete == std::string::npos) return 0;  // a line still being written
  consumed_ += complete + 1;
  added.resize(complete);

  absl::StatusOr<int> gpus = nvml_.DeviceCount();
  int injected = 0;
  for (absl::string_view line : absl::StrSplit(added, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
    int gpu = -1;
    uint64_t xid = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &gpu) ||
        !absl::SimpleAtoi(fields[1], &xid)) {
      PHX_LOG(WARNING) << "--fake_xid_file: ignoring '" << line
                       << "' (want \"<gpu index> <xid>\", e.g. \"1 79\")";
      continue;
    }
    if (!gpus.ok() || gpu < 0 || gpu >= *gpus) {
      PHX_LOG(WARNING) << "--fake_xid_file: ignoring '" << line << "': no fake GPU " << gpu;
      continue;
    }
    PHX_LOG(WARNING) << "--fake_xid_file: injecting XID " << xid << " on fake GPU " << gpu;
    nvml_.InjectXid(gpu, xid);
    ++injected;
  }
  return injected;
}

}  // namespace phalanx::agent
