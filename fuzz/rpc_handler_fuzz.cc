// Fuzz target: the coordination RPC handler, proto bytes in → request message → RpcHandler →
// an in-process CoordinationService (FakeClock, no gRPC) → a status out. The input is a
// sequence of calls, so later calls meet the state earlier ones built (registered tasks, pending
// barriers, keys, sessions):
//   byte 0: the job's task count (1..8)
//   then records: [method byte][length: 2 bytes big-endian][serialized request]
// The method byte's low 4 bits pick the RPC (15 = a Session stream message); with its top bit
// set, low bits 0 to 3 pick the calls added since the table filled up (KeyValueAdd,
// KeyValueCompareAndSet, ReportRolledBack, ReportStepping) and other low bits the same RPC as
// without it; bits 4-6 are how many seconds the clock moves before the service's Tick. Bytes that
// do not parse as the request message are refused, as gRPC would. At the end the service stops;
// every stored callback must have completed exactly once (CONVENTIONS.md). The synchronous calls'
// statuses are ignored (IgnoreError): random requests are mostly refused, and any answer is a valid
// one here; what the target checks is that nothing crashes and every callback completes once.
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/fake_clock.h"
#include "fuzz/fuzz_input.h"
#include "prometheus/registry.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/service_test_util.h"

namespace {

namespace pb = ::phalanx::coord::v1;
using phalanx::coord::CallResult;
using phalanx::coord::RpcHandler;

// Counts completions; a second completion of the same call is a crash.
struct Calls {
  int issued = 0;
  int completed = 0;
  RpcHandler::Done Done() {
    ++issued;
    return [this, fired = false](absl::Status) mutable {
      PHALANX_FUZZ_CHECK(!fired);
      fired = true;
      ++completed;
    };
  }
  RpcHandler::CallDone CallDone() {
    ++issued;
    return [this, fired = false](CallResult) mutable {
      PHALANX_FUZZ_CHECK(!fired);
      fired = true;
      ++completed;
    };
  }
};

// Owns response messages until the end of the input (async calls fill them when they finish).
template <typename T>
T* Keep(std::deque<std::unique_ptr<google::protobuf::Message>>& store) {
  store.push_back(std::make_unique<T>());
  return static_cast<T*>(store.back().get());
}

template <typename T>
bool Parse(T& msg, const std::string& bytes) {
  return msg.ParseFromString(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  phalanx::testing::FakeClock clock;
  prometheus::Registry registry;
  phalanx::coord::CoordinatorMetrics metrics(registry);
  phalanx::coord::CoordinationService::Options options;
  options.num_tasks = 1 + data[0] % 8;
  auto service = phalanx::coord::CoordinationService::Create(options, clock, metrics);
  PHALANX_FUZZ_CHECK(service.ok());
  RpcHandler handler(**service);
  Calls calls;
  std::deque<std::unique_ptr<google::protobuf::Message>> responses;
  std::vector<std::unique_ptr<phalanx::coord::testing::RecordingSession>> transports;
  std::vector<RpcHandler::Session> sessions;

  size_t at = 1;
  while (at + 3 <= size) {
    const uint8_t method = data[at];
    const size_t len = std::min<size_t>(data[at + 1] << 8 | data[at + 2], size - at - 3);
    const std::string bytes(reinterpret_cast<const char*>(data + at + 3), len);
    at += 3 + len;
    clock.Advance(absl::Seconds((method >> 4) & 0x7));
    (*service)->Tick(clock.Now());
    if ((method & 0x80) != 0 && (method & 0xf) < 4) {
      switch (method & 0xf) {
        case 0: {
          pb::KeyValueAddRequest req;
          if (Parse(req, bytes)) {
            handler.KvAdd(req, Keep<pb::KeyValueAddResponse>(responses)).IgnoreError();
          }
          break;
        }
        case 1: {
          pb::KeyValueCompareAndSetRequest req;
          if (Parse(req, bytes)) {
            handler.KvCompareAndSet(req, Keep<pb::KeyValueCompareAndSetResponse>(responses))
                .IgnoreError();
          }
          break;
        }
        case 2: {
          pb::ReportRolledBackRequest req;
          if (Parse(req, bytes)) {
            handler.ReportRolledBack(req, Keep<pb::ReportRolledBackResponse>(responses))
                .IgnoreError();
          }
          break;
        }
        default: {
          pb::ReportSteppingRequest req;
          if (Parse(req, bytes)) handler.ReportStepping(req).IgnoreError();
          break;
        }
      }
      continue;
    }
    switch (method & 0xf) {
      case 0: {
        pb::RegisterRequest req;
        if (Parse(req, bytes)) {
          handler.Register(req, Keep<pb::RegisterResponse>(responses)).IgnoreError();
        }
        break;
      }
      case 1: {
        pb::ReportErrorRequest req;
        if (Parse(req, bytes)) handler.ReportError(req).IgnoreError();
        break;
      }
      case 2: {
        pb::BarrierRequest req;
        if (Parse(req, bytes)) handler.Barrier(req, calls.Done());
        break;
      }
      case 3: {
        pb::CancelBarrierRequest req;
        if (Parse(req, bytes)) handler.CancelBarrier(req).IgnoreError();
        break;
      }
      case 4: {
        pb::KeyValueInsertRequest req;
        if (Parse(req, bytes)) handler.KvInsert(req).IgnoreError();
        break;
      }
      case 5: {
        pb::KeyValueGetRequest req;
        if (Parse(req, bytes)) {
          handler.KvGet(req, Keep<pb::KeyValueGetResponse>(responses), calls.Done());
        }
        break;
      }
      case 6: {
        pb::KeyValueTryGetRequest req;
        if (Parse(req, bytes)) {
          handler.KvTryGet(req, Keep<pb::KeyValueGetResponse>(responses)).IgnoreError();
        }
        break;
      }
      case 7: {
        pb::KeyValueGetDirRequest req;
        if (Parse(req, bytes)) {
          handler.KvGetDir(req, Keep<pb::KeyValueGetDirResponse>(responses)).IgnoreError();
        }
        break;
      }
      case 8: {
        pb::KeyValueDeleteRequest req;
        if (Parse(req, bytes)) {
          handler.KvDelete(req, Keep<pb::KeyValueDeleteResponse>(responses)).IgnoreError();
        }
        break;
      }
      case 9: {
        pb::WatchJobStateRequest req;
        if (Parse(req, bytes)) {
          handler.WatchJobState(req, Keep<pb::WatchJobStateResponse>(responses), calls.Done());
        }
        break;
      }
      case 10: {
        pb::GetAliveTasksRequest req;
        if (Parse(req, bytes)) {
          handler.GetAliveTasks(req, Keep<pb::GetAliveTasksResponse>(responses), calls.Done());
        }
        break;
      }
      case 11: {
        pb::NotifyPreemptionRequest req;
        if (Parse(req, bytes)) {
          handler.NotifyPreemption(req, Keep<pb::NotifyPreemptionResponse>(responses))
              .IgnoreError();
        }
        break;
      }
      case 12: {
        pb::ReportSyncStepRequest req;
        if (Parse(req, bytes)) {
          handler.ReportSyncStep(req, Keep<pb::ReportSyncStepResponse>(responses), calls.Done());
        }
        break;
      }
      case 13: {
        pb::ShutdownRequest req;
        if (Parse(req, bytes)) handler.Shutdown(req, calls.Done());
        break;
      }
      case 14: {  // the stream ended
        if (!sessions.empty()) {
          handler.CloseSession(sessions.back(), absl::UnavailableError("fuzz: stream closed"));
          sessions.pop_back();
        }
        break;
      }
      default: {  // a Session stream message
        pb::SessionRequest req;
        if (!Parse(req, bytes)) break;
        if (req.has_open()) {
          transports.push_back(std::make_unique<phalanx::coord::testing::RecordingSession>());
          auto session = handler.OpenSession(req.open(), transports.back()->outbox());
          if (session.ok()) sessions.push_back(*session);
        } else if (!sessions.empty() && req.has_call()) {
          handler.SessionCall(sessions.back(), req.call(), calls.CallDone());
        } else if (!sessions.empty()) {
          handler.Heartbeat(sessions.back(), req);
        }
        break;
      }
    }
  }
  clock.Advance(absl::Hours(2));  // past max_wait: every wait has expired
  (*service)->Tick(clock.Now());
  (*service)->Stop();
  PHALANX_FUZZ_CHECK(calls.completed == calls.issued);
  service->reset();
  return 0;
}
