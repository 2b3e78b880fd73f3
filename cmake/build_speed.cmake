# How the build is kept fast on 2-core machines (docs/development.md, "Where the time goes").
#
# - lld links: most of the ~170 link steps are test executables against gRPC, protobuf and
#   cpprest; lld is several times faster than GNU ld at that.
# - Unity builds (PHALANX_UNITY_BUILD, on by default): the project's .cc files spend most of
#   their compile time parsing the same heavy headers (gtest/gmock, gRPC, protobuf, cpprest) and
#   generating the same inline template code; compiling a target's files in batches does that once
#   per batch. Files that cannot share a translation unit set SKIP_UNITY_BUILD_INCLUSION.
#   -DPHALANX_UNITY_BUILD=OFF builds file by file (e.g. to check every header includes what it
#   uses).
find_program(PHALANX_LLD ld.lld)
option(PHALANX_USE_LLD "Link with lld when it is installed" ON)
if(PHALANX_USE_LLD AND PHALANX_LLD)
  add_link_options(-fuse-ld=lld)
  message(STATUS "phalanx: linking with ${PHALANX_LLD}")
endif()

option(PHALANX_UNITY_BUILD "Compile each target's sources in batches (unity build)" ON)
set(PHALANX_UNITY_BATCH_SIZE 6 CACHE STRING "Sources per unity translation unit")
if(PHALANX_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${PHALANX_UNITY_BATCH_SIZE})
endif()
