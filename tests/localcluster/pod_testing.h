// Pods as tests of the local cluster's kubelet and container launcher write them.
#pragma once

#include <string>
#include <vector>

#include "common/kube/json.h"

namespace phalanx::localcluster::test_pods {

using Json = kube::Json;

inline Json Strings(const std::vector<std::string>& values) {
  Json array = Json::array();
  for (const std::string& v : values) array[array.size()] = Json::string(v);
  return array;
}

// A pod running `script` under /bin/sh -c, unbound (the kubelet's scheduler pass binds it).
inline Json ShellPod(const std::string& name, const std::string& script,
                     const std::string& restart_policy = "Never", int grace_seconds = 30) {
  Json pod = Json::object();
  pod["apiVersion"] = Json::string("v1");
  pod["kind"] = Json::string("Pod");
  pod["metadata"]["name"] = Json::string(name);
  pod["spec"]["restartPolicy"] = Json::string(restart_policy);
  pod["spec"]["terminationGracePeriodSeconds"] = Json::number(grace_seconds);
  Json container = Json::object();
  container["name"] = Json::string("main");
  container["image"] = Json::string("ignored:latest");
  container["command"] = Strings({"/bin/sh", "-c", script});
  pod["spec"]["containers"] = Json::array();
  pod["spec"]["containers"][0] = container;
  return pod;
}

}  // namespace phalanx::localcluster::test_pods
