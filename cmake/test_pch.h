// The headers nearly every test binary parses (gtest/gmock, the standard library, absl's status,
// strings, time and mutex), precompiled once and reused by every test target under clang
// (phalanx_test_binary_code in cmake/phalanx_helpers.cmake). Only headers from outside the
// project: a project header here would make every test rebuild when it changes.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
