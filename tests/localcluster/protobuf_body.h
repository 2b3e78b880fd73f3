// Protobuf request bodies (Content-Type application/vnd.kubernetes.protobuf), as kubectl 1.32
// sends them for its `create` generators (`kubectl create namespace|configmap|secret|
// serviceaccount`). client-go does not fall back to JSON when a server refuses protobuf, so the
// built-in API server decodes the kinds those generators make into the JSON object a JSON client
// would have sent. Other kinds are refused with 415 UnsupportedMediaType and a message that says
// to send JSON (`kubectl apply -f`); a real kube-apiserver decodes every built-in kind.
//
// Wire format: the magic "k8s\0", then a runtime.Unknown message {typeMeta{apiVersion, kind},
// raw (the object's own message), contentEncoding, contentType}. Pure functions; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <string>

#include "absl/status/statusor.h"

namespace phalanx::localcluster {

inline constexpr char kProtobufContentType[] = "application/vnd.kubernetes.protobuf";

// The JSON object of a protobuf body. InvalidArgument for a body that is not a Kubernetes
// protobuf envelope or is malformed; Unimplemented (→ 415) for a kind this decoder does not know.
absl::StatusOr<web::json::value> DecodeProtobufBody(const std::string& body);

}  // namespace phalanx::localcluster
