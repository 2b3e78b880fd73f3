// Fuzz target: the TrainingJob codec and validation (DecodeSpec, ValidateSpec, ValidateName,
// DecodeStatus, EncodeStatus): what the operator runs on every job object the API server hands
// it. The input is a whole TrainingJob as JSON. Nothing may throw or crash, a decoded spec is
// always validated, and DecodeStatus(EncodeStatus(s)) == s for any status read (codec.h's
// promise).
#include <cstdio>
#include <cstdlib>

#include "common/kube/object_meta.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_json.h"
#include "operator/api/codec.h"
#include "operator/api/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phalanx::op;
  std::optional<Json> job = phalanx::fuzz::ParseJson(data, size);
  if (!job) return 0;
  ValidateName(phalanx::kube::MetaString(*job, "name"));
  absl::StatusOr<TrainingJobSpec> spec = DecodeSpec(*job);
  if (spec.ok()) {
    ValidateSpec(*spec);
  } else {
    PHALANX_FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  }
  const TrainingJobStatus status = DecodeStatus(*job);
  Json wrapped = Json::object();
  wrapped["status"] = EncodeStatus(status);
  PHALANX_FUZZ_CHECK(DecodeStatus(wrapped) == status);
  for (const TaskStatus& task : status.tasks) ParseTaskState(TaskStateName(task.state));
  return 0;
}
