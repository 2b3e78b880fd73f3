#include "runtime/coordination/health_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace phalanx::coord {

namespace {

// HealthCheckResponse is `ServingStatus status = 1;` with SERVING = 1. The probe decodes the
// two bytes itself rather than generating grpc.health.v1 stubs (the proto is not shipped by
// Debian's libgrpc++-dev, and the coordination proto stays the only one protoc builds here).
constexpr char kServingResponse[] = {0x08, 0x01};

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

}  // namespace

absl::Status CheckGrpcHealth(const std::string& target, absl::Duration timeout,
                             const std::optional<std::string>& tls_server_name) {
  grpc::ChannelArguments args;
  // A channel of its own: a shared subchannel would carry a previous failure's reconnect
  // backoff into this check.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls_server_name.has_value()) {
    // The process checks its own port over loopback: whose certificate answers is not in
    // question, only that the server answers through a real handshake. The name is the
    // certificate's own, so the server finds it (SNI) and logs no mismatch.
    if (!tls_server_name->empty()) args.SetSslTargetNameOverride(*tls_server_name);
    grpc::experimental::TlsChannelCredentialsOptions options;
    options.set_verify_server_certs(false);
    options.set_check_call_host(false);
    options.set_certificate_verifier(
        std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
    credentials = grpc::experimental::TlsCredentials(options);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, credentials, args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""} encodes as zero bytes
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  // gRPC completes every call by its deadline, so this wait is bounded by `timeout`.
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("health check RPC to ", target, " failed: code ",
                                               status.error_code(), ": ", status.error_message()));
  }
  if (Flatten(response) != std::string(kServingResponse, sizeof(kServingResponse))) {
    return absl::UnavailableError(absl::StrCat("health check RPC to ", target, ": not SERVING"));
  }
  return absl::OkStatus();
}

std::string LoopbackTarget(const std::string& listen_address, int port) {
  std::string host = listen_address.substr(0, listen_address.rfind(':'));
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]" || host == "::") host = "[::1]";
  return absl::StrCat(host, ":", port);
}

}  // namespace phalanx::coord
