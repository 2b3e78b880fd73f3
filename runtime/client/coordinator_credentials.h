// How a client reaches its coordinator over TLS (ADR 0006): the job's CA and the name the
// coordinator's certificate must carry, the same for gRPC channels and the session wire.
// The operator gives task pods both (PHALANX_TLS_CA_FILE, PHALANX_TLS_SERVER_NAME): tasks dial
// the coordinator's Service or its pod IP, and its certificate names the Service whichever.
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace phalanx::client {

struct CoordinatorTls {
  std::string ca_pem;       // empty: cleartext
  std::string server_name;  // empty: the host of the address dialled
  bool enabled() const { return !ca_pem.empty(); }
};

// Cleartext credentials without `tls.ca_pem`; else TLS verifying against it, with `args` told
// the name to verify (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG) when `tls.server_name` is set.
std::shared_ptr<grpc::ChannelCredentials> CoordinatorChannelCredentials(
    const CoordinatorTls& tls, grpc::ChannelArguments& args);

// The name a wire connection to `address` (host:port) verifies: `tls.server_name`, or the host.
std::string TlsServerName(const CoordinatorTls& tls, const std::string& address);

}  // namespace phalanx::client
