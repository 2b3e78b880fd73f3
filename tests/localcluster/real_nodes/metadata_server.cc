#include "tests/localcluster/real_nodes/metadata_server.h"

#include <CivetServer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace phalanx::localcluster {
namespace {

void Reply(mg_connection* conn, int code, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nMetadata-Flavor: Google\r\nContent-Type: application/text\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            code, code == 200 ? "OK" : (code == 403 ? "Forbidden" : "Not Found"), body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

class NodeMetadataServer::Handler : public CivetHandler {
 public:
  explicit Handler(const std::atomic<bool>& preempted) : preempted_(preempted) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    const mg_request_info* request = mg_get_request_info(conn);
    const char* flavor = mg_get_header(conn, "Metadata-Flavor");
    if (flavor == nullptr || std::string(flavor) != "Google") {
      Reply(conn, 403, "Missing Metadata-Flavor:Google header.\n");
      return true;
    }
    const std::string path = request->local_uri != nullptr ? request->local_uri : "";
    if (path == "/computeMetadata/v1/instance/preempted") {
      Reply(conn, 200, preempted_ ? "TRUE" : "FALSE");
    } else if (path == "/computeMetadata/v1/instance/maintenance-event") {
      Reply(conn, 200, "NONE");
    } else {
      Reply(conn, 404, "not found\n");
    }
    return true;
  }

 private:
  const std::atomic<bool>& preempted_;
};

absl::StatusOr<std::unique_ptr<NodeMetadataServer>> NodeMetadataServer::Start(
    const std::string& address, int port) {
  std::unique_ptr<NodeMetadataServer> server(new NodeMetadataServer());
  server->handler_ = std::make_unique<Handler>(server->preempted_);
  const std::string listen = absl::StrCat(address, ":", port);
  const std::vector<std::string> options = {
      "listening_ports",    listen, "num_threads",       "2",
      "request_timeout_ms", "5000", "enable_keep_alive", "no"};
  try {
    server->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the metadata server on ", listen, ": ", e.what()));
  }
  server->server_->addHandler("/computeMetadata/", server->handler_.get());
  const std::vector<int> ports = server->server_->getListeningPorts();
  if (ports.empty()) return absl::UnavailableError("the metadata server has no listening port");
  server->url_ = absl::StrCat("http://", address, ":", ports.front());
  return server;
}

NodeMetadataServer::~NodeMetadataServer() {
  if (server_) server_->close();  // stops the worker threads before the handler goes away
}

}  // namespace phalanx::localcluster
