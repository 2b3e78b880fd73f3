#include "runtime/client/coordinator_credentials.h"

#include <grpc/grpc_security_constants.h>

#include "common/base/tcp_dial.h"

namespace phalanx::client {

std::shared_ptr<grpc::ChannelCredentials> CoordinatorChannelCredentials(
    const CoordinatorTls& tls, grpc::ChannelArguments& args) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

std::string TlsServerName(const CoordinatorTls& tls, const std::string& address) {
  if (!tls.server_name.empty()) return tls.server_name;
  // A malformed address fails its dial with the reason; the name is moot then.
  absl::StatusOr<std::pair<std::string, std::string>> host_port =
      base::SplitHostPort(address, "PHALANX_COORDINATOR");
  return host_port.ok() ? host_port->first : address;
}

}  // namespace phalanx::client
