// The built-in back end keeps its objects in the in-memory API fake of common/kube/testing
// (ObjectStore, its WatchEvent and ListResult); this header names them in the local cluster's
// namespace, with the one JSON type. Header only.
#pragma once

#include "common/kube/client.h"
#include "common/kube/testing/object_store.h"

namespace phalanx::localcluster {

using kube::Json;
using kube::fake::ListResult;
using kube::fake::ObjectStore;
using kube::fake::WatchEvent;

}  // namespace phalanx::localcluster
