// The C ABI (phalanx_c.h) over CoordinationClientImpl. Converts statuses to codes plus a
// thread-local message; never lets a C++ exception cross into C.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/client/phalanx_c.h"
#include "runtime/client/spare_assignment.h"
#include "runtime/client/unconfirmed_sets.h"
#include "runtime/coordination/error_details.h"

namespace {

using phalanx::client::ClientCallbacks;
using phalanx::client::ClientConfig;
using phalanx::client::CoordinationClientImpl;

thread_local std::string g_last_error;
thread_local std::string g_last_error_details;

// The failure's facts as JSON (field names as in coordination.proto's ErrorDetails), or "".
std::string DetailsJson(const absl::Status& status) {
  std::optional<phalanx::coord::pb::ErrorDetails> details = phalanx::coord::DetailsOf(status);
  if (!details.has_value()) return "";
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(*details, &json, options).ok()) return "";
  return json;
}

int Report(const absl::Status& status) {
  g_last_error = status.ok() ? "" : std::string(status.message());
  g_last_error_details = DetailsJson(status);
  return static_cast<int>(status.code());
}

int InvalidArgument(const char* message) { return Report(absl::InvalidArgumentError(message)); }

// Copies bytes into a malloc'ed, NUL-terminated buffer.
void* CopyOut(const std::string& bytes) {
  char* out = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (out == nullptr) return nullptr;
  std::memcpy(out, bytes.data(), bytes.size());
  out[bytes.size()] = '\0';
  return out;
}

absl::Duration Millis(int64_t ms) { return absl::Milliseconds(ms); }

}  // namespace

struct phalanx_client {
  // The process that created it. A fork()ed child has its memory but not its session thread:
  // a call there would wait out its whole timeout (once 12 s, for a write the parent's session
  // had in fact applied), and destroying it would join threads that do not exist.
  const pid_t owner = getpid();
  absl::Mutex mu;
  phalanx_peer_change_fn peer_fn ABSL_GUARDED_BY(mu) = nullptr;
  void* peer_user ABSL_GUARDED_BY(mu) = nullptr;
  phalanx_preemption_fn preemption_fn ABSL_GUARDED_BY(mu) = nullptr;
  phalanx_preemption2_fn preemption2_fn ABSL_GUARDED_BY(mu) = nullptr;
  void* preemption_user ABSL_GUARDED_BY(mu) = nullptr;
  phalanx_reconnect_fn reconnect_fn ABSL_GUARDED_BY(mu) = nullptr;
  void* reconnect_user ABSL_GUARDED_BY(mu) = nullptr;
  std::unique_ptr<CoordinationClientImpl> impl;
  const std::shared_ptr<phalanx::client::UnconfirmedSets> unconfirmed_sets =
      std::make_shared<phalanx::client::UnconfirmedSets>();
};

namespace {

// 0, or FailedPrecondition (reported) when called in a fork()ed child of the client's process.
int RefuseInForkedChild(const phalanx_client& client) {
  if (client.owner == getpid()) return 0;
  return Report(absl::FailedPreconditionError(
      absl::StrCat("this phalanx client belongs to process ", client.owner,
                   ", which forked this one (", getpid(),
                   "): a child cannot use its parent's session. Call from the parent, or create a "
                   "client of the child's own")));
}

int Create(ClientConfig config, phalanx_client** out) {
  if (out == nullptr) return InvalidArgument("out is NULL");
  *out = nullptr;
  auto* client = new phalanx_client;
  ClientCallbacks callbacks;
  callbacks.on_peer_change = [client](const phalanx::client::TaskInfo& info) {
    phalanx_peer_change_fn fn;
    void* user;
    {
      absl::MutexLock lock(&client->mu);
      fn = client->peer_fn;
      user = client->peer_user;
    }
    if (fn != nullptr) {
      fn(user, info.task_id, phalanx::base::IncarnationToWire(info.incarnation),
         static_cast<int>(info.state), info.reason.c_str());
    }
  };
  callbacks.on_preemption = [client](const phalanx::client::PreemptionRound& round) {
    phalanx_preemption_fn fn;
    phalanx_preemption2_fn fn2;
    void* user;
    {
      absl::MutexLock lock(&client->mu);
      fn = client->preemption_fn;
      fn2 = client->preemption2_fn;
      user = client->preemption_user;
    }
    const int64_t deadline =
        round.deadline == absl::InfiniteFuture() ? 0 : absl::ToUnixMillis(round.deadline);
    if (fn2 != nullptr) {
      fn2(user, round.round, deadline, round.reason.c_str(), round.affected_tasks.data(),
          round.affected_tasks.size());
    } else if (fn != nullptr) {
      fn(user, round.round, deadline, round.reason.c_str());
    }
  };
  callbacks.on_reconnect = [client](bool coordinator_restarted) {
    phalanx_reconnect_fn fn;
    void* user;
    {
      absl::MutexLock lock(&client->mu);
      fn = client->reconnect_fn;
      user = client->reconnect_user;
    }
    if (fn != nullptr) fn(user, coordinator_restarted ? 1 : 0);
  };
  auto impl = CoordinationClientImpl::Create(std::move(config), std::move(callbacks));
  if (!impl.ok()) {
    delete client;
    return Report(impl.status());
  }
  client->impl = *std::move(impl);
  *out = client;
  return Report(absl::OkStatus());
}

}  // namespace

extern "C" {

const char* phalanx_last_error(void) { return g_last_error.c_str(); }

const char* phalanx_last_error_details(void) { return g_last_error_details.c_str(); }

void phalanx_free(void* p) { std::free(p); }

int phalanx_client_create_from_env(phalanx_client** out) {
  absl::StatusOr<ClientConfig> config = ClientConfig::FromEnv();
  if (!config.ok()) {
    if (out != nullptr) *out = nullptr;
    return Report(config.status());
  }
  return Create(*std::move(config), out);
}

int phalanx_await_assignment(int64_t unreachable_timeout_ms, int* task_id,
                             phalanx_incarnation_t* incarnation, char* credential,
                             size_t capacity) {
  if (task_id == nullptr || incarnation == nullptr || credential == nullptr) {
    return InvalidArgument("task_id, incarnation and credential must not be NULL");
  }
  absl::StatusOr<phalanx::client::SpareConfig> config = phalanx::client::SpareConfig::FromEnv();
  if (!config.ok()) return Report(config.status());
  absl::StatusOr<phalanx::client::SpareIdentity> identity = phalanx::client::AwaitSpareAssignment(
      *config, absl::Milliseconds(std::max<int64_t>(unreachable_timeout_ms, 0)));
  if (!identity.ok()) return Report(identity.status());
  if (identity->credential.size() + 1 > capacity) {
    return InvalidArgument("the credential does not fit in `capacity` bytes");
  }
  std::memcpy(credential, identity->credential.c_str(), identity->credential.size() + 1);
  *task_id = identity->task_id;
  *incarnation = identity->incarnation;
  return Report(absl::OkStatus());
}

int phalanx_client_create(const char* coordinator, const char* job, int task_id, int num_tasks,
                          phalanx_incarnation_t incarnation, const char* token,
                          phalanx_client** out) {
  if (coordinator == nullptr || job == nullptr || token == nullptr) {
    return InvalidArgument("coordinator, job and token must not be NULL");
  }
  if (phalanx::base::IncarnationFromWire(incarnation) == phalanx::base::kNoIncarnation) {
    return InvalidArgument("incarnation must be at most 2^63 - 1");
  }
  ClientConfig config;
  config.coordinator = coordinator;
  config.job = job;
  config.task_id = task_id;
  config.num_tasks = num_tasks;
  config.incarnation = phalanx::base::IncarnationFromWire(incarnation);
  config.token = token;
  return Create(std::move(config), out);
}

void phalanx_client_destroy(phalanx_client* client) {
  if (client == nullptr) return;
  if (client->owner != getpid()) return;  // a forked child's copy is leaked (see owner)
  client->impl.reset();  // joins the session thread before the callbacks' state goes away
  delete client;
}

void phalanx_set_peer_change_callback(phalanx_client* client, phalanx_peer_change_fn fn,
                                      void* user) {
  if (client == nullptr) return;
  absl::MutexLock lock(&client->mu);
  client->peer_fn = fn;
  client->peer_user = user;
}

void phalanx_set_preemption_callback(phalanx_client* client, phalanx_preemption_fn fn, void* user) {
  if (client == nullptr) return;
  absl::MutexLock lock(&client->mu);
  client->preemption_fn = fn;
  client->preemption2_fn = nullptr;
  client->preemption_user = user;
}

void phalanx_set_preemption_callback2(phalanx_client* client, phalanx_preemption2_fn fn,
                                      void* user) {
  if (client == nullptr) return;
  absl::MutexLock lock(&client->mu);
  client->preemption2_fn = fn;
  client->preemption_fn = nullptr;
  client->preemption_user = user;
}

void phalanx_set_reconnect_callback(phalanx_client* client, phalanx_reconnect_fn fn, void* user) {
  if (client == nullptr) return;
  absl::MutexLock lock(&client->mu);
  client->reconnect_fn = fn;
  client->reconnect_user = user;
}

int phalanx_task_id(const phalanx_client* client) {
  return client == nullptr ? -1 : client->impl->task().task_id;
}
int phalanx_num_tasks(const phalanx_client* client) {
  return client == nullptr ? -1 : client->impl->num_tasks();
}
phalanx_incarnation_t phalanx_incarnation(const phalanx_client* client) {
  return client == nullptr ? 0 : phalanx::base::IncarnationToWire(client->impl->task().incarnation);
}

int phalanx_connect(phalanx_client* client, int64_t timeout_ms) {
  if (client == nullptr) return InvalidArgument("client is NULL");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->Connect(Millis(timeout_ms)));
}

int phalanx_wait_until_connected(phalanx_client* client, int64_t timeout_ms) {
  if (client == nullptr) return InvalidArgument("client is NULL");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->WaitUntilConnected(Millis(timeout_ms)));
}

int phalanx_connected(const phalanx_client* client) {
  return client != nullptr && client->impl->connected() ? 1 : 0;
}

int phalanx_barrier(phalanx_client* client, const char* id, int64_t timeout_ms, const int* tasks,
                    size_t num_tasks) {
  if (client == nullptr || id == nullptr) return InvalidArgument("client and id are required");
  std::vector<int> subset;
  if (tasks != nullptr) subset.assign(tasks, tasks + num_tasks);
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->Barrier(id, Millis(timeout_ms), subset));
}

int phalanx_cancel_barrier(phalanx_client* client, const char* id) {
  if (client == nullptr || id == nullptr) return InvalidArgument("client and id are required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->CancelBarrier(id));
}

int phalanx_kv_set(phalanx_client* client, const char* key, const void* value, size_t value_len,
                   int allow_overwrite) {
  if (client == nullptr || key == nullptr || (value == nullptr && value_len > 0)) {
    return InvalidArgument("client, key and value are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->KvInsert(key, std::string(static_cast<const char*>(value), value_len),
                                       allow_overwrite != 0));
}

int phalanx_kv_set_nowait(phalanx_client* client, const char* key, const void* value,
                          size_t value_len, int allow_overwrite) {
  if (client == nullptr || key == nullptr || (value == nullptr && value_len > 0)) {
    return InvalidArgument("client, key and value are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  std::string bytes(static_cast<const char*>(value), value_len);
  if (absl::Status earlier = client->unconfirmed_sets->TakeFailure(); !earlier.ok()) {
    return Report(
        phalanx::coord::WithContext(earlier, "an earlier set sent without waiting failed: "));
  }
  if (!client->impl->connected()) {
    // Without a session it would be a separate RPC, which later session calls could overtake.
    return Report(client->impl->KvInsert(key, bytes, allow_overwrite != 0));
  }
  client->impl->KvInsertAsync(key, std::move(bytes), allow_overwrite != 0,
                              client->unconfirmed_sets->Track());
  return Report(absl::OkStatus());
}

int phalanx_kv_wait_sets(phalanx_client* client, int64_t timeout_ms) {
  if (client == nullptr) return InvalidArgument("client is required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  absl::Status status = client->unconfirmed_sets->Wait(Millis(timeout_ms));
  if (!status.ok() && !absl::IsDeadlineExceeded(status)) {
    status = phalanx::coord::WithContext(status, "a set sent without waiting failed: ");
  }
  return Report(status);
}

static int ReturnValue(absl::StatusOr<std::string> result, void** value, size_t* value_len) {
  if (!result.ok()) return Report(result.status());
  *value = CopyOut(*result);
  if (*value == nullptr) return Report(absl::ResourceExhaustedError("out of memory"));
  *value_len = result->size();
  return Report(absl::OkStatus());
}

int phalanx_kv_get(phalanx_client* client, const char* key, int64_t timeout_ms, void** value,
                   size_t* value_len) {
  if (client == nullptr || key == nullptr || value == nullptr || value_len == nullptr) {
    return InvalidArgument("client, key, value and value_len are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return ReturnValue(client->impl->KvGet(key, Millis(timeout_ms)), value, value_len);
}

int phalanx_kv_try_get(phalanx_client* client, const char* key, void** value, size_t* value_len) {
  if (client == nullptr || key == nullptr || value == nullptr || value_len == nullptr) {
    return InvalidArgument("client, key, value and value_len are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return ReturnValue(client->impl->KvTryGet(key), value, value_len);
}

int phalanx_kv_dir(phalanx_client* client, const char* directory, phalanx_kv_entry** entries,
                   size_t* count) {
  if (client == nullptr || directory == nullptr || entries == nullptr || count == nullptr) {
    return InvalidArgument("client, directory, entries and count are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  auto result = client->impl->KvGetDir(directory);
  if (!result.ok()) return Report(result.status());
  *count = result->size();
  *entries =
      static_cast<phalanx_kv_entry*>(std::calloc(result->size() + 1, sizeof(phalanx_kv_entry)));
  if (*entries == nullptr) return Report(absl::ResourceExhaustedError("out of memory"));
  for (size_t i = 0; i < result->size(); ++i) {
    (*entries)[i].key = static_cast<char*>(CopyOut((*result)[i].first));
    (*entries)[i].value = CopyOut((*result)[i].second);
    (*entries)[i].value_len = (*result)[i].second.size();
  }
  return Report(absl::OkStatus());
}

void phalanx_kv_entries_free(phalanx_kv_entry* entries, size_t count) {
  if (entries == nullptr) return;
  for (size_t i = 0; i < count; ++i) {
    std::free(entries[i].key);
    std::free(entries[i].value);
  }
  std::free(entries);
}

int phalanx_kv_delete(phalanx_client* client, const char* key, int* deleted) {
  if (client == nullptr || key == nullptr) return InvalidArgument("client and key are required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  absl::StatusOr<int> result = client->impl->KvDelete(key);
  if (!result.ok()) return Report(result.status());
  if (deleted != nullptr) *deleted = *result;
  return Report(absl::OkStatus());
}

int phalanx_kv_add(phalanx_client* client, const char* key, int64_t delta, int64_t* value) {
  if (client == nullptr || key == nullptr || value == nullptr) {
    return InvalidArgument("client, key and value are required");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  absl::StatusOr<int64_t> sum = client->impl->KvAdd(key, delta);
  if (!sum.ok()) return Report(sum.status());
  *value = *sum;
  return Report(absl::OkStatus());
}

int phalanx_kv_compare_set(phalanx_client* client, const char* key, const void* expected,
                           size_t expected_len, const void* desired, size_t desired_len,
                           int* swapped, int* present, void** value, size_t* value_len) {
  if (client == nullptr || key == nullptr || (desired == nullptr && desired_len > 0) ||
      swapped == nullptr || present == nullptr || value == nullptr || value_len == nullptr) {
    return InvalidArgument(
        "client, key, desired, swapped, present, value and value_len are required");
  }
  std::optional<std::string> want;
  if (expected != nullptr) want.emplace(static_cast<const char*>(expected), expected_len);
  const std::string put(desired == nullptr ? "" : static_cast<const char*>(desired), desired_len);
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  auto result = client->impl->KvCompareAndSet(key, want, put);
  if (!result.ok()) return Report(result.status());
  *swapped = result->swapped ? 1 : 0;
  *present = result->value.has_value() ? 1 : 0;
  *value = nullptr;
  *value_len = 0;
  if (!result->value.has_value()) return Report(absl::OkStatus());
  return ReturnValue(*std::move(result->value), value, value_len);
}

int phalanx_report_error(phalanx_client* client, const char* message) {
  if (client == nullptr || message == nullptr)
    return InvalidArgument("client and message are required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->ReportError(message));
}

int phalanx_report_rolled_back(phalanx_client* client, const char* recovery, double seconds) {
  if (client == nullptr || recovery == nullptr)
    return InvalidArgument("client and recovery are required");
  if (!std::isfinite(seconds) || seconds < 0) {
    return InvalidArgument("seconds must be finite and not negative");
  }
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->ReportRolledBack(recovery, absl::Seconds(seconds)));
}

int phalanx_report_stepping(phalanx_client* client) {
  if (client == nullptr) return InvalidArgument("client is required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->ReportStepping());
}

int phalanx_alive_tasks(phalanx_client* client, const int* tasks, size_t num_tasks,
                        int64_t timeout_ms, int* task_ids, phalanx_incarnation_t* incarnations,
                        size_t capacity, size_t* count) {
  if (client == nullptr || count == nullptr)
    return InvalidArgument("client and count are required");
  std::vector<int> subset;
  if (tasks != nullptr) subset.assign(tasks, tasks + num_tasks);
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  auto alive = client->impl->GetAliveTasks(subset, Millis(timeout_ms));
  if (!alive.ok()) return Report(alive.status());
  *count = alive->size();
  for (size_t i = 0; i < alive->size() && i < capacity; ++i) {
    if (task_ids != nullptr) task_ids[i] = (*alive)[i].task_id;
    if (incarnations != nullptr) {
      incarnations[i] = phalanx::base::IncarnationToWire((*alive)[i].incarnation);
    }
  }
  return Report(absl::OkStatus());
}

int phalanx_notify_preemption(phalanx_client* client, const char* reason, int64_t deadline_unix_ms,
                              const int* tasks, size_t num_tasks, uint64_t* round) {
  if (client == nullptr) return InvalidArgument("client is NULL");
  phalanx::client::PreemptionNotice notice;
  notice.reason = reason == nullptr ? "" : reason;
  notice.deadline =
      deadline_unix_ms <= 0 ? absl::InfiniteFuture() : absl::FromUnixMillis(deadline_unix_ms);
  if (tasks != nullptr) notice.affected_tasks.assign(tasks, tasks + num_tasks);
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  auto result = client->impl->NotifyPreemption(notice);
  if (!result.ok()) return Report(result.status());
  if (round != nullptr) *round = result->round;
  return Report(absl::OkStatus());
}

int phalanx_reached_sync_point(phalanx_client* client, int64_t step, int* reached) {
  if (client == nullptr || reached == nullptr)
    return InvalidArgument("client and reached are required");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  absl::StatusOr<bool> result = client->impl->ReachedSyncPoint(step);
  if (!result.ok()) return Report(result.status());
  *reached = *result ? 1 : 0;
  return Report(absl::OkStatus());
}

int phalanx_shutdown(phalanx_client* client, int64_t timeout_ms) {
  if (client == nullptr) return InvalidArgument("client is NULL");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->Shutdown(Millis(timeout_ms)));
}

int phalanx_leave(phalanx_client* client, const char* reason, int64_t timeout_ms) {
  if (client == nullptr) return InvalidArgument("client is NULL");
  if (int forked = RefuseInForkedChild(*client); forked != 0) return forked;
  return Report(client->impl->Leave(reason == nullptr ? "" : reason, Millis(timeout_ms)));
}

}  // extern "C"
