#include "node_agent/gpu/node_checks.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/env_and_files.h"

namespace phalanx::agent {
namespace {

constexpr char kThpName[] = "transparent_hugepages";
constexpr char kDriverName[] = "nvidia_driver";
constexpr char kCudaName[] = "cuda_compatibility";
constexpr char kNoDriver[] = "no NVIDIA driver";

}  // namespace

absl::StatusOr<std::string> ParseThpSetting(absl::string_view contents) {
  std::string selected;
  int bracketed = 0;
  for (absl::string_view word :
       absl::StrSplit(absl::StripAsciiWhitespace(contents), ' ', absl::SkipEmpty())) {
    if (word.size() >= 3 && word.front() == '[' && word.back() == ']') {
      selected = std::string(word.substr(1, word.size() - 2));
      ++bracketed;
    } else if (absl::StrContains(word, '[') || absl::StrContains(word, ']')) {
      bracketed = -1;
      break;
    }
  }
  if (bracketed != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "want one bracketed value like \"always [madvise] never\", got \"", contents, "\""));
  }
  return selected;
}

CheckResult CheckTransparentHugePages(const std::string& path) {
  CheckResult result{kThpName, true, ""};
  absl::StatusOr<std::string> contents = base::ReadFileToString(path);
  if (!contents.ok()) {
    result.message = absl::StrCat("not checked: ", contents.status().message());
    return result;
  }
  absl::StatusOr<std::string> setting = ParseThpSetting(*contents);
  if (!setting.ok()) {
    result.message = absl::StrCat("not checked: ", path, ": ", setting.status().message());
    return result;
  }
  if (*setting == "always") {
    result.ok = false;
    result.message = absl::StrCat(
        "transparent hugepages is \"always\": compaction can stall training steps; set it to "
        "madvise (echo madvise > ",
        path, ")");
  } else {
    result.message = absl::StrCat("transparent hugepages is \"", *setting, "\"");
  }
  return result;
}

CheckResult CheckNvidiaDriver(const absl::Status& nvml_status, const GpuInventory& inventory) {
  CheckResult result{kDriverName, nvml_status.ok(), ""};
  if (!nvml_status.ok()) {
    result.message = absl::StartsWith(nvml_status.message(), kNoDriver)
                         ? std::string(nvml_status.message())
                         : absl::StrCat(kNoDriver, ": ", nvml_status.message());
    return result;
  }
  result.message =
      absl::StrCat("NVIDIA driver ", inventory.driver_version, " (CUDA ", inventory.cuda_version,
                   "), ", inventory.gpus.size(), " GPU", inventory.gpus.size() == 1 ? "" : "s");
  return result;
}

absl::StatusOr<int> ParseCudaVersion(absl::string_view version) {
  std::vector<absl::string_view> parts = absl::StrSplit(version, '.');
  int major = 0;
  int minor = 0;
  int patch = 0;
  const bool ok =
      version.find_first_not_of("0123456789.") == absl::string_view::npos && parts.size() <= 3 &&
      absl::SimpleAtoi(parts[0], &major) && major > 0 &&
      (parts.size() < 2 || (absl::SimpleAtoi(parts[1], &minor) && minor >= 0 && minor < 100)) &&
      (parts.size() < 3 || (absl::SimpleAtoi(parts[2], &patch) && patch >= 0));
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA version \"", version, "\": want MAJOR.MINOR, e.g. 12.4"));
  }
  return major * 1000 + minor * 10;
}

CheckResult CheckCudaCompatibility(int driver_cuda_version, absl::string_view requested) {
  CheckResult result{kCudaName, false, ""};
  absl::StatusOr<int> wanted = ParseCudaVersion(requested);
  if (!wanted.ok()) {
    result.message = std::string(wanted.status().message());
    return result;
  }
  const std::string wanted_text = FormatCudaVersion(*wanted);
  if (driver_cuda_version <= 0) {
    result.message =
        absl::StrCat("the driver's CUDA version is unknown but the job asks for ", wanted_text);
    return result;
  }
  // Compare major.minor only: a driver supports every patch release of its minor version.
  const int driver = driver_cuda_version / 1000 * 1000 + driver_cuda_version % 1000 / 10 * 10;
  const std::string driver_text = FormatCudaVersion(driver_cuda_version);
  result.ok = driver >= *wanted;
  result.message = result.ok ? absl::StrCat("driver supports CUDA ", driver_text,
                                            ", the job asks for ", wanted_text)
                             : absl::StrCat("driver supports CUDA ", driver_text,
                                            " but the job asks for ", wanted_text);
  return result;
}

}  // namespace phalanx::agent
