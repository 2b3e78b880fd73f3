// The Kubernetes resource types Phalanx's components and tests name, in one place (a misspelt
// group or a wrong `namespaced` flag shows up as a 404 far from its cause). Header only.
#pragma once

#include "common/kube/client.h"

namespace phalanx::kube {

inline const Resource kPods{"", "v1", "pods", true};
inline const Resource kNodes{"", "v1", "nodes", false};
inline const Resource kServices{"", "v1", "services", true};
inline const Resource kSecrets{"", "v1", "secrets", true};
inline const Resource kServiceAccounts{"", "v1", "serviceaccounts", true};
inline const Resource kConfigMaps{"", "v1", "configmaps", true};
inline const Resource kNamespaces{"", "v1", "namespaces", false};
inline const Resource kEvents{"", "v1", "events", true};
inline const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", true};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", true};
inline const Resource kCustomResourceDefinitions{"apiextensions.k8s.io", "v1",
                                                 "customresourcedefinitions", false};

}  // namespace phalanx::kube
