#include "runtime/client/coordinator_credentials.h"

#include <grpc/grpc_security_constants.h>

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
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [v6]:port
  }
  return host;
}

}  // namespace phalanx::client
