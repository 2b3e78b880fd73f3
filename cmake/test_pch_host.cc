// The target that builds cmake/test_pch.h's precompiled header with the test binaries' flags,
// for them to reuse (cmake/phalanx_helpers.cmake). It is linked but never run.
#include "test_pch.h"

TEST(TestPchHost, Builds) { SUCCEED(); }
