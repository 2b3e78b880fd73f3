// The headers most of the project's libraries parse (the standard library, absl, cpprest's JSON
// and HTTP client), precompiled once and reused by every library under clang
// (cmake/library_pch.cmake). Only headers from outside the project: a project header here would
// make every library rebuild when it changes. gRPC is left out: its users' time is generating
// code, not parsing (a coordination-server batch 22.5 s, 20.1 s with gRPC precompiled).
#pragma once

#include <cpprest/http_client.h>
#include <cpprest/json.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
