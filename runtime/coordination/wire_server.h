// WireSessionServer: the server side of the session wire (coordination.proto, ADR 0005): a
// task's registration and Session over plain framed TCP on the coordinator's own port, for the
// hot path (barriers, key-value calls, heartbeats, events), without HTTP/2 and gRPC's thread
// hand-offs. The ConnectionListener hands it the connections whose first byte is the wire's.
// A connection carries the sessions of one client process's tasks as streams (wire_format.h):
// each stream is registered, authenticated and closed on its own; the connection's end closes
// every session on it, as the process's death does.
//
// One event-loop thread reads every wire connection, cuts frames and hands them to the
// RpcHandler, exactly as SessionReactor does for the gRPC stream (the same conversions, auth,
// per-call metrics and CloseSession on a break: the crash signal). Writes are made by whichever
// thread produces the event (the service's, when a barrier releases, or the loop's, for a call
// answered at once): a non-blocking send, the rest left for the loop when the socket is full.
// So an answer costs no thread hand-off on this side.
//
// Bounds: a client frame over `max_frame_bytes` (`max_unauthenticated_frame_bytes` before the
// connection's first accepted hello) ends the connection (InvalidArgument); a client
// that stops reading while more than `max_unsent_bytes` wait for it is disconnected (its
// session breaks, as a hung task's would). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/tls_session.h"

namespace phalanx::coord {

class WireSessionServer {
 public:
  struct Options {
    std::string token;  // the job token; task credentials derived from it are accepted too
    size_t max_frame_bytes = 4 << 20;
    // The same until a hello on the connection was accepted: a hello is a credential, a job name
    // and a task reference (well under 1 KiB). Reads are this size too until then, so an
    // unauthenticated connection holds at most twice this.
    size_t max_unauthenticated_frame_bytes = 4 << 10;
    size_t max_unsent_bytes = 64 << 20;  // per connection, however many tasks it carries
    // Tasks one process may run over one connection (a task-host or test process runs many).
    // A stream whose session ended (superseded, declared failed) is freed at once and does not
    // count.
    size_t max_streams_per_connection = 16384;
    // Streams one task credential may hold on all connections together (the job token, which
    // the operator and tools hold, is bounded per connection only).
    int max_streams_per_task_credential = 4;
    // The coordinator's certificate (tls_session.h): when set, a connection must ask for TLS
    // (kWireTlsMagic) and everything after its magic is TLS; a cleartext client is refused.
    std::shared_ptr<const TlsContext> tls{};
  };
  // Called with a connection's peer name once it presented a valid credential.
  using Authenticated = absl::AnyInvocable<void(const std::string& peer)>;

  // `handler`, `metrics` and `clock` must outlive the server.
  WireSessionServer(Options options, RpcHandler& handler, CoordinatorMetrics& metrics,
                    base::Clock& clock, Authenticated authenticated);
  ~WireSessionServer();
  WireSessionServer(const WireSessionServer&) = delete;
  WireSessionServer& operator=(const WireSessionServer&) = delete;

  // Starts the event loop. Unavailable if epoll cannot be set up.
  absl::Status Start();
  // Takes ownership of `fd` (non-blocking), a connection named `peer` ("ipv4:…").
  void Adopt(int fd, std::string peer);
  // Closes every connection (their sessions end as broken) and stops the loop. Idempotent.
  void Stop();

 private:
  class Connection;
  class Stream;
  using StreamMap = absl::flat_hash_map<uint32_t, std::unique_ptr<Stream>>;

  void Loop();
  // Reads what has arrived, handles every whole frame, and closes the connection if it ended.
  void Readable(const std::shared_ptr<Connection>& connection);
  void HandleFrames(const std::shared_ptr<Connection>& connection);
  // Answers the client's magic; false when the connection must end (another version, or
  // cleartext where TLS is required, or the reverse). Starts TLS when both sides want it.
  bool AcceptMagic(const std::shared_ptr<Connection>& connection, std::string_view magic);
  // Frees the streams whose session's end went out since the last call (loop thread).
  void ReapEndedStreams(Connection& connection);
  void HandleFrame(const std::shared_ptr<Connection>& connection, uint32_t stream,
                   std::string_view payload);
  // Ends a stream: detaches its outbox and closes its session (a task gone: `why`).
  void EndStream(Connection& connection, StreamMap::iterator stream, const absl::Status& why);
  // A stream is gone: its count in the metrics and in streams_of_task_.
  void Forget(const Stream& stream);
  void Close(const std::shared_ptr<Connection>& connection, const absl::Status& why);

  const Options options_;
  RpcHandler& handler_;
  CoordinatorMetrics& metrics_;
  base::Clock& clock_;
  Authenticated authenticated_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  // Live streams by the task credential that opened them (loop thread only; Stop() closes the
  // last connections after the loop has ended).
  absl::flat_hash_map<int, int> streams_of_task_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<int, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::coord
