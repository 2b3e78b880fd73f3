// SessionChannel: a task's standing connection to its coordinator, the part of
// CoordinationClientImpl that lives on its own thread. The session thread registers the task,
// keeps its Session stream (session_stream.h) alive with heartbeats, dispatches the stream's
// events to the client's callbacks, and on a break reconnects with backoff and re-registers the
// same incarnation (a restarted coordinator accepts it; a live one that declared this
// incarnation failed answers Aborted, which is fatal). While a stream is open it also carries
// calls (TrySend), which is cheaper than a unary RPC each.
//
// Time: heartbeats, the hang check, the reconnect backoff and WaitUntilConnected read and wait
// on the injected clock (condition waits, so a new event or Stop() ends them at once; never a
// sleep). Calls' own deadlines are gRPC's, in real time (rpc_caller.h).
//
// Thread-safe. Callbacks and Listener methods run on the session thread, in order, never under
// mu_; call results run on gRPC threads.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "runtime/client/client_config.h"
#include "runtime/client/coordination_client.h"
#include "runtime/client/rpc_caller.h"
#include "runtime/client/session_stream.h"

namespace phalanx::client {

class SessionChannel final : public SessionStream::Sink {
 public:
  // What the owner does with the events the channel does not turn into ClientCallbacks.
  class Listener {
   public:
    virtual ~Listener() = default;
    // Registered with a coordinator other than the last one (it restarted and lost its
    // state); called before the new session opens.
    virtual void OnCoordinatorRestarted() = 0;
    // A preemption round arrived on the session (callbacks.on_preemption is the owner's).
    virtual void OnPreemptionRound(const PreemptionRound& round) = 0;
  };
  // A call's result: its status and, for a key-value get, the value.
  using CallDone = absl::AnyInvocable<void(absl::Status, std::string) &&>;

  // `config`, `callbacks`, `rpc` and `listener` must outlive the channel.
  SessionChannel(const ClientConfig& config, const ClientCallbacks& callbacks, base::Clock& clock,
                 const RpcCaller& rpc, Listener& listener);
  // Stops the session thread; without a prior Shutdown the service sees the session break.
  ~SessionChannel() override { Stop(); }

  // Starts the session (once; later calls do nothing). On the session wire the first
  // registration and `open` are made on the calling thread, within `first_attempt` (at most the
  // registration's 2 s), so a caller that then waits in WaitUntilConnected is woken without a
  // hop through a new thread; the session thread takes over the stream (or, if that attempt
  // failed, retries as always).
  void Start(absl::Duration first_attempt = absl::Seconds(2));
  // Waits until the session is open. Errors: the fatal status if there is one,
  // FailedPrecondition before Start(), DeadlineExceeded naming the coordinator.
  absl::Status WaitUntilConnected(absl::Duration timeout);
  bool connected() const;

  // Sends `call` on the open session; its result goes to `done`. False, with `call` and `done`
  // untouched, when no session is open or the call is too big to ride on it: the caller then
  // makes it a unary RPC.
  bool TrySend(coord::v1::SessionCall& call, CallDone& done);

  // Ends the session thread without reconnecting; returns once it has ended. Idempotent.
  void Stop();
  // Tells the coordinator this task is leaving (a departure, not a failure: no peer's wait fails
  // for it), waits up to `timeout` for the coordinator to end the session, then Stop()s.
  // FailedPrecondition when no session is open; DeadlineExceeded when the coordinator did not
  // end the session in time (it was closed anyway: peers may then see a failure).
  absl::Status Leave(const std::string& reason, absl::Duration timeout);

  // SessionStream::Sink (gRPC threads).
  void OnSessionEvent(coord::SessionEvent event) override;
  void OnSessionDone(absl::Status status) override;

 private:
  // `first`: a stream the first registration already opened (nullptr: register first).
  void SessionLoop(std::shared_ptr<SessionStream> first);
  // Registers the task and makes the stream its session will run on (not started); returns
  // whether the coordinator changed since the last registration.
  absl::StatusOr<bool> RegisterTask(bool ever_connected, std::shared_ptr<SessionStream>* stream,
                                    absl::Duration timeout = absl::Seconds(2));
  // The registration's answer: checks it names our job, notes the coordinator and heartbeats.
  absl::StatusOr<bool> AcceptRegistration(const coord::v1::RegisterResponse& reg,
                                          bool ever_connected);
  // Whether to try the session wire (session thread only).
  bool UseWire() const;
  // Sets call_stream_ from stream_ and connected_; called wherever either changes, in the
  // same critical section, so TrySend sees them as one.
  void PublishCallStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one open stream until it ends; returns its final status.
  absl::Status RunStream(SessionStream& stream, bool reconnect, bool coordinator_restarted);
  void Dispatch(coord::SessionEvent event, bool reconnect, bool coordinator_restarted);
  void SetFatal(const absl::Status& status);
  // Waits `delay` before the next attempt unless Stop() ends the wait; true when stopping.
  bool BackOff(absl::Duration delay);
  // The same in real time, for a wait inside a transport attempt (the wire's re-dial).
  bool PauseUnlessStopping(absl::Duration delay);

  const ClientConfig& config_;
  const ClientCallbacks& callbacks_;
  base::Clock& clock_;
  const RpcCaller& rpc_;
  Listener& listener_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Leave() sent `leave`: the stream's end is the coordinator's confirmation, not a break to
  // reconnect from.
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool session_opened_ ABSL_GUARDED_BY(mu_) = false;  // the current stream got its `opened`
  std::optional<absl::Status> fatal_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  absl::Duration heartbeat_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  std::deque<coord::SessionEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> stream_done_ ABSL_GUARDED_BY(mu_);
  // While a session is connected. Shared: a call holds it while it writes, outside mu_.
  std::shared_ptr<SessionStream> stream_ ABSL_GUARDED_BY(mu_);
  bool wire_refused_ = false;  // the coordinator does not speak the wire (session thread only)

  // The call path has its own lock: the session thread waits on mu_ with a condition, and
  // every release of a mutex with such a waiter evaluates it (absl), so a call and its answer
  // that took mu_ would each pay for the session thread's wait.
  mutable absl::Mutex calls_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // The stream calls ride: stream_ while connected_, else null.
  std::shared_ptr<SessionStream> call_stream_ ABSL_GUARDED_BY(calls_mu_);
  uint64_t next_call_id_ ABSL_GUARDED_BY(calls_mu_) = 1;
  absl::flat_hash_map<uint64_t, CallDone> pending_calls_ ABSL_GUARDED_BY(calls_mu_);
  absl::Time last_contact_ ABSL_GUARDED_BY(calls_mu_);
  std::thread session_thread_;  // started once under mu_; joined by Stop()
};

}  // namespace phalanx::client
