#include "runtime/coordination/coordinator_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "runtime/coordination/connection_listener.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/session_reactor.h"
#include "runtime/coordination/status_codec.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/coordination/wire_server.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

class CoordinatorServer::Impl final : public pb::Coordination::CallbackService {
 public:
  Impl(std::string token, CoordinationService& service, CoordinatorMetrics& metrics,
       base::Clock& clock, ConnectionListener& listener)
      : token_(std::move(token)),
        handler_(service),
        metrics_(metrics),
        clock_(clock),
        listener_(listener) {}

  grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionEvent>* Session(
      grpc::CallbackServerContext* ctx) override {
    absl::StatusOr<auth::Principal> auth = Authenticate(*ctx);
    metrics_.Rpc("Session", auth.status().code(), absl::ZeroDuration());
    return new SessionReactor(handler_, metrics_, clock_, std::move(auth));
  }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const pb::RegisterRequest* req,
                                     pb::RegisterResponse* resp) override {
    return Unary(ctx, "Register", ForTask(req->task()),
                 [&](Finisher done) { done(handler_.Register(*req, resp)); });
  }
  grpc::ServerUnaryReactor* ReportError(grpc::CallbackServerContext* ctx,
                                        const pb::ReportErrorRequest* req,
                                        pb::ReportErrorResponse*) override {
    return Unary(ctx, "ReportError", ForTask(req->task()),
                 [&](Finisher done) { done(handler_.ReportError(*req)); });
  }
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const pb::BarrierRequest* req,
                                    pb::BarrierResponse*) override {
    return Unary(ctx, "Barrier", ForTask(req->task()),
                 [&](Finisher done) { handler_.Barrier(*req, std::move(done)); });
  }
  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const pb::CancelBarrierRequest* req,
                                          pb::CancelBarrierResponse*) override {
    return Unary(ctx, "CancelBarrier", ForTask(req->task()),
                 [&](Finisher done) { done(handler_.CancelBarrier(*req)); });
  }
  grpc::ServerUnaryReactor* KeyValueInsert(grpc::CallbackServerContext* ctx,
                                           const pb::KeyValueInsertRequest* req,
                                           pb::KeyValueInsertResponse*) override {
    return Unary(ctx, "KeyValueInsert", JobWide(),
                 [&](Finisher done) { done(handler_.KvInsert(*req)); });
  }
  grpc::ServerUnaryReactor* KeyValueGet(grpc::CallbackServerContext* ctx,
                                        const pb::KeyValueGetRequest* req,
                                        pb::KeyValueGetResponse* resp) override {
    return Unary(ctx, "KeyValueGet", req->has_task() ? ForTask(req->task()) : JobWide(),
                 [&](Finisher done) { handler_.KvGet(*req, resp, std::move(done)); });
  }
  grpc::ServerUnaryReactor* KeyValueTryGet(grpc::CallbackServerContext* ctx,
                                           const pb::KeyValueTryGetRequest* req,
                                           pb::KeyValueGetResponse* resp) override {
    return Unary(ctx, "KeyValueTryGet", JobWide(),
                 [&](Finisher done) { done(handler_.KvTryGet(*req, resp)); });
  }
  grpc::ServerUnaryReactor* KeyValueGetDir(grpc::CallbackServerContext* ctx,
                                           const pb::KeyValueGetDirRequest* req,
                                           pb::KeyValueGetDirResponse* resp) override {
    return Unary(ctx, "KeyValueGetDir", JobWide(),
                 [&](Finisher done) { done(handler_.KvGetDir(*req, resp)); });
  }
  grpc::ServerUnaryReactor* KeyValueDelete(grpc::CallbackServerContext* ctx,
                                           const pb::KeyValueDeleteRequest* req,
                                           pb::KeyValueDeleteResponse* resp) override {
    return Unary(ctx, "KeyValueDelete", JobWide(),
                 [&](Finisher done) { done(handler_.KvDelete(*req, resp)); });
  }
  grpc::ServerUnaryReactor* KeyValueAdd(grpc::CallbackServerContext* ctx,
                                        const pb::KeyValueAddRequest* req,
                                        pb::KeyValueAddResponse* resp) override {
    return Unary(ctx, "KeyValueAdd", JobWide(),
                 [&](Finisher done) { done(handler_.KvAdd(*req, resp)); });
  }
  grpc::ServerUnaryReactor* KeyValueCompareAndSet(
      grpc::CallbackServerContext* ctx, const pb::KeyValueCompareAndSetRequest* req,
      pb::KeyValueCompareAndSetResponse* resp) override {
    return Unary(ctx, "KeyValueCompareAndSet", JobWide(),
                 [&](Finisher done) { done(handler_.KvCompareAndSet(*req, resp)); });
  }
  grpc::ServerUnaryReactor* WatchJobState(grpc::CallbackServerContext* ctx,
                                          const pb::WatchJobStateRequest* req,
                                          pb::WatchJobStateResponse* resp) override {
    return Unary(ctx, "WatchJobState", JobWide(),
                 [&](Finisher done) { handler_.WatchJobState(*req, resp, std::move(done)); });
  }
  grpc::ServerUnaryReactor* GetAliveTasks(grpc::CallbackServerContext* ctx,
                                          const pb::GetAliveTasksRequest* req,
                                          pb::GetAliveTasksResponse* resp) override {
    return Unary(ctx, "GetAliveTasks", ForTask(req->task()),
                 [&](Finisher done) { handler_.GetAliveTasks(*req, resp, std::move(done)); });
  }
  grpc::ServerUnaryReactor* NotifyPreemption(grpc::CallbackServerContext* ctx,
                                             const pb::NotifyPreemptionRequest* req,
                                             pb::NotifyPreemptionResponse* resp) override {
    return Unary(ctx, "NotifyPreemption", JobWide(),
                 [&](Finisher done) { done(handler_.NotifyPreemption(*req, resp)); });
  }
  grpc::ServerUnaryReactor* ReportSyncStep(grpc::CallbackServerContext* ctx,
                                           const pb::ReportSyncStepRequest* req,
                                           pb::ReportSyncStepResponse* resp) override {
    return Unary(ctx, "ReportSyncStep", ForTask(req->task()),
                 [&](Finisher done) { handler_.ReportSyncStep(*req, resp, std::move(done)); });
  }
  grpc::ServerUnaryReactor* ReportRolledBack(grpc::CallbackServerContext* ctx,
                                             const pb::ReportRolledBackRequest* req,
                                             pb::ReportRolledBackResponse* resp) override {
    return Unary(ctx, "ReportRolledBack", ForTask(req->task()),
                 [&](Finisher done) { done(handler_.ReportRolledBack(*req, resp)); });
  }
  grpc::ServerUnaryReactor* ReportStepping(grpc::CallbackServerContext* ctx,
                                           const pb::ReportSteppingRequest* req,
                                           pb::ReportSteppingResponse* /*resp*/) override {
    return Unary(ctx, "ReportStepping", ForTask(req->task()),
                 [&](Finisher done) { done(handler_.ReportStepping(*req)); });
  }
  grpc::ServerUnaryReactor* AwaitAssignment(grpc::CallbackServerContext* ctx,
                                            const pb::AwaitAssignmentRequest* req,
                                            pb::AwaitAssignmentResponse* resp) override {
    auth::Principal spare;
    return Unary(
        ctx, "AwaitAssignment", SpareOnly(),
        [&](Finisher done) {
          handler_.AwaitAssignment(
              spare.spare, *req, resp, [this, resp, done](absl::Status status) mutable {
                // The task's credential for the incarnation it takes over: what the spare acts
                // with now (bound to it, as a task pod's own is).
                if (status.ok() && resp->assigned()) {
                  const int64_t incarnation = base::IncarnationFromWire(resp->incarnation());
                  resp->set_credential(
                      auth::TaskCredential(token_, resp->task_id(), incarnation, incarnation));
                }
                done(std::move(status));
              });
        },
        &spare);
  }
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx,
                                     const pb::ShutdownRequest* req,
                                     pb::ShutdownResponse*) override {
    return Unary(ctx, "Shutdown", ForTask(req->task()),
                 [&](Finisher done) { handler_.Shutdown(*req, std::move(done)); });
  }

 private:
  // Completes one unary call: records its metrics, then finishes the reactor.
  class Finisher {
   public:
    Finisher(grpc::ServerUnaryReactor* reactor, const char* method, absl::Time start, Impl* impl)
        : reactor_(reactor), method_(method), start_(start), impl_(impl) {}
    void operator()(absl::Status status) {
      impl_->metrics_.Rpc(method_, status.code(), impl_->clock_.Now() - start_);
      reactor_->Finish(ToGrpcStatus(status));
    }

   private:
    grpc::ServerUnaryReactor* reactor_;
    const char* method_;
    absl::Time start_;
    Impl* impl_;
  };

  // `who`, when given, learns the caller's principal before `body` runs.
  template <typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* method,
                                  CallScope scope, Body&& body, auth::Principal* who = nullptr) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    Finisher done(reactor, method, clock_.Now(), this);
    absl::StatusOr<auth::Principal> principal = Authenticate(*ctx);
    absl::Status auth = principal.ok() ? Authorize(*principal, scope) : principal.status();
    // A call naming a task names its incarnation, which Authorize checked; a job-wide one does
    // not, so a bound credential's is compared with the task's newest here.
    if (auth.ok() && scope.task_id == CallScope::kJobWide) {
      auth = handler_.CheckNotSuperseded(*principal);
    }
    if (!auth.ok()) {
      if (principal.ok()) metrics_.AuthFailure();  // a task acting as another one
      done(auth);
      return reactor;
    }
    if (who != nullptr) *who = *principal;
    body(std::move(done));
    return reactor;
  }

  absl::StatusOr<auth::Principal> Authenticate(const grpc::CallbackServerContext& ctx) {
    absl::StatusOr<auth::Principal> principal = CheckToken(ctx, token_);
    if (!principal.ok()) metrics_.AuthFailure();
    // A connection that carried a valid credential is never closed as unauthenticated.
    if (principal.ok()) listener_.MarkAuthenticated(ctx.peer());
    return principal;
  }

  const std::string token_;
  RpcHandler handler_;
  CoordinatorMetrics& metrics_;
  base::Clock& clock_;
  ConnectionListener& listener_;
};

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Options options, CoordinationService& service, CoordinatorMetrics& metrics,
    base::Clock& clock) {
  if (options.token.empty()) {
    return absl::InvalidArgumentError("the coordination service needs a non-empty job token");
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and its private key");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  std::shared_ptr<const TlsContext> wire_tls;
  if (!options.tls_cert_pem.empty()) {
    // The same certificate for the session wire; made first, so bad PEM is refused here with
    // OpenSSL's reason rather than by gRPC at the first handshake.
    absl::StatusOr<std::shared_ptr<const TlsContext>> context =
        TlsContext::ForServer(options.tls_cert_pem, options.tls_key_pem);
    if (!context.ok()) return context.status();
    wire_tls = *std::move(context);
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  // The listener, not gRPC, owns the port: see connection_listener.h for why (gRPC 1.51 stops
  // accepting for good after one EMFILE, and has no connection limit).
  auto listener = ConnectionListener::Listen(
      {options.listen_address, options.max_connections, options.unauthenticated_timeout}, clock,
      metrics);
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  server->port_ = server->listener_->port();
  server->impl_ =
      std::make_unique<Impl>(options.token, service, metrics, clock, *server->listener_);
  // grpc.health.v1.Health on the same port, answering SERVING for "" without a token, so a
  // kubelet gRPC liveness probe (and /healthz's loopback check) reach the real server.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  builder.RegisterService(server->impl_.get());
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  grpc::ResourceQuota quota("phalanx-coordinator");
  quota.Resize(options.grpc_memory_bytes);
  builder.SetResourceQuota(quota);
  // Tasks heartbeat on their session; transport keepalive is only a backstop for half-open
  // connections, so allow clients to ping as often as every 10 s.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot start the gRPC server for ", options.listen_address));
  }
  ConnectionListener::Handoff to_grpc = [acceptor = std::move(acceptor)](int listen_fd, int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
    connection.listener_fd = listen_fd;
    connection.fd = fd;
    acceptor->HandleNewConnection(&connection);
  };
  if (!options.session_wire) {
    server->listener_->Start(std::move(to_grpc));
    return server;
  }
  server->wire_handler_ = std::make_unique<RpcHandler>(service);
  server->wire_ = std::make_unique<WireSessionServer>(
      WireSessionServer::Options{
          .token = options.token,
          .max_frame_bytes = static_cast<size_t>(options.max_receive_message_bytes),
          .tls = std::move(wire_tls)},
      *server->wire_handler_, metrics, clock,
      [listener = server->listener_.get()](const std::string& peer) {
        listener->MarkAuthenticated(peer);
      });
  if (absl::Status started = server->wire_->Start(); !started.ok()) return started;
  server->listener_->Start(
      std::move(to_grpc),
      [wire = server->wire_.get()](int fd, std::string peer) { wire->Adopt(fd, std::move(peer)); });
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(absl::ZeroDuration()); }

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  listener_->Stop();  // no new connections while the calls drain
  if (wire_ != nullptr) wire_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
}

void CoordinatorServer::Tick(absl::Time now) { listener_->Tick(now); }

int CoordinatorServer::open_connections() { return listener_->open_connections(); }

void CoordinatorServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace phalanx::coord
