#include "examples/sample_worker/checkpoint_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace phalanx::examples {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> SavedSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &step)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, int task_id, int keep)
    : dir_(absl::StrCat(dir, "/task-", task_id)), keep_(keep) {}

absl::Status CheckpointStore::Save(int64_t step, uint64_t state) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir_, ": ", ec.message()));
  const std::string path = absl::StrCat(dir_, "/step-", step);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << state << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  std::vector<int64_t> steps = SavedSteps(dir_);
  for (size_t i = 0; i + keep_ < steps.size(); ++i) {
    fs::remove(absl::StrCat(dir_, "/step-", steps[i]), ec);
  }
  return absl::OkStatus();
}

std::vector<int64_t> CheckpointStore::Kept() const { return SavedSteps(dir_); }

absl::StatusOr<uint64_t> CheckpointStore::Load(int64_t step) const {
  std::ifstream in(absl::StrCat(dir_, "/step-", step));
  uint64_t state;
  if (!(in >> state)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint for step ", step, " in ", dir_));
  }
  return state;
}

uint64_t AdvanceState(uint64_t state, int64_t step) {
  // splitmix64 of (state, step): cheap and deterministic.
  uint64_t z = state + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace phalanx::examples
