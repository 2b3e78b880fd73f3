// ConnectionListener: the coordinator's own accept loop in front of the gRPC server.
//
// Why it exists: gRPC 1.51 (Debian bookworm's libgrpc++) stops accepting for good after one
// `accept4` fails with EMFILE ("Failed accept4: Too many open files"): every later RPC times
// out even once all connections are gone. 1.51 also has no connection limit (no
// GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS, no per-connection quota) and keeps an idle HTTP/2
// preface open forever. So the coordinator listens itself, accepts with `accept4`, and hands
// each admitted socket to the server through an ExternalConnectionAcceptor (which, unlike
// AddInsecureChannelFromFd, also takes TLS credentials). Here:
//   - at most `max_connections` are open; one more is accepted and closed at once (counted);
//   - at most `max_unauthenticated_connections` of them have not yet carried a valid
//     credential: a new one past that share shuts the oldest such one down (counted), so a
//     flood of unauthenticated connections can neither take the slots of the authenticated ones
//     nor keep a new, legitimate client out (its hello comes within milliseconds of connecting);
//   - on EMFILE/ENFILE a spare descriptor is given up to accept and close one pending
//     connection, and accepting pauses for `accept_backoff` instead of stopping;
//   - a connection that has not carried a call with a valid credential within
//     `unauthenticated_timeout` (raw TCP that sends nothing, an idle HTTP/2 preface, health
//     probes) is shut down by Tick().
// gRPC names a connection handed over this way by its peer address ("ipv4:127.0.0.1:40000",
// ServerContext::peer()), so MarkAuthenticated(peer) finds it. To shut a connection down
// without racing gRPC's close of its descriptor (whose number the kernel may reuse), the
// listener keeps a dup() of every socket: shutdown() on the dup reaches the same socket, and
// the dup's HUP tells the listener the connection has ended. Each connection therefore costs
// two descriptors.
//
// Used by CoordinatorServer. Thread-safe: one accept thread (started by Start) polls the
// listening socket and the dups; Tick and MarkAuthenticated may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "runtime/coordination/metrics.h"

namespace phalanx::coord {

class ConnectionListener {
 public:
  struct Options {
    std::string listen_address = "127.0.0.1:0";  // host:port, [v6]:port; port 0: any
    int max_connections = 1000;
    absl::Duration unauthenticated_timeout = absl::Seconds(5);
    absl::Duration accept_backoff = absl::Milliseconds(100);
    // 0: a quarter of max_connections (at least 1); negative: no share (any slot may be
    // unauthenticated, and past max_connections a newcomer is refused, none shut down).
    int max_unauthenticated_connections = 0;
  };
  // Takes ownership of an admitted connection's descriptor `fd`.
  using Handoff = absl::AnyInvocable<void(int listen_fd, int fd)>;
  // Takes ownership of a connection whose first byte is the session wire's (wire_format.h),
  // named `peer` as gRPC would name it.
  using WireHandoff = absl::AnyInvocable<void(int fd, std::string peer)>;

  // Binds and listens (SO_REUSEADDR, so a restarted coordinator gets its port back).
  // InvalidArgument for a malformed address or max_connections < 1; Unavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ConnectionListener>> Listen(Options options,
                                                                    base::Clock& clock,
                                                                    CoordinatorMetrics& metrics);
  ~ConnectionListener();
  ConnectionListener(const ConnectionListener&) = delete;
  ConnectionListener& operator=(const ConnectionListener&) = delete;

  int port() const { return port_; }
  // Starts the accept thread. Call once. With `wire_handoff`, a connection is handed over once
  // its first byte has arrived: to `wire_handoff` when it is the session wire's, else to
  // `handoff` (gRPC). Without, every connection goes to `handoff` at once.
  void Start(Handoff handoff, WireHandoff wire_handoff = nullptr);
  // The connection gRPC calls `peer` ("ipv4:127.0.0.1:40000") carried a call with a valid
  // credential: it is never closed for being unauthenticated. Unknown peers are ignored.
  void MarkAuthenticated(std::string_view peer);
  // Shuts down connections still unauthenticated `unauthenticated_timeout` after their accept.
  void Tick(absl::Time now);
  int open_connections();
  // Stops accepting and closes the listening socket and the dups (gRPC still owns its
  // descriptors and closes them at its shutdown). Idempotent.
  void Stop();

 private:
  struct Connection {
    int watch_fd = -1;         // our dup of the socket
    int unclassified_fd = -1;  // the socket itself, until its first byte says whose it is
    absl::Time accepted;
    bool authenticated = false;
    bool shut_down = false;
  };

  ConnectionListener(Options options, base::Clock& clock, CoordinatorMetrics& metrics)
      : options_(std::move(options)), clock_(clock), metrics_(metrics) {}
  void Loop();
  // Accepts until the backlog is empty, the descriptors run out, or Stop().
  void AcceptPending();
  void Admit(int fd, const std::string& peer);
  // The connection watched by `watch_fd` has ended (HUP on the dup).
  void Ended(int watch_fd);
  // Its first byte has arrived (or it ended first): hands it to the wire or to gRPC. False
  // when `watch_fd` is not waiting for its first byte.
  bool Classify(int watch_fd);
  void ForgetLocked(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps room for one more unauthenticated connection in its share: shuts the oldest one
  // down when the share is full.
  void MakeRoomForUnauthenticatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int unauthenticated_share() const;
  void ShedOneWithSpare();
  void PauseAccepting();

  const Options options_;
  base::Clock& clock_;
  CoordinatorMetrics& metrics_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;  // /dev/null, given up to shed a connection when descriptors run out
  int port_ = 0;
  Handoff handoff_;
  WireHandoff wire_handoff_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  absl::Time resume_accepting_ = absl::InfinitePast();  // accept thread only
  bool accepting_ = true;                               // accept thread only

  absl::Mutex mu_;
  // By peer address, as gRPC names it.
  absl::flat_hash_map<std::string, Connection> connections_ ABSL_GUARDED_BY(mu_);
  // watch fd → peer.
  absl::flat_hash_map<int, std::string> by_watch_fd_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace phalanx::coord
