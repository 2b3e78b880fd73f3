include(GoogleTest)

# phalanx_test(NAME SOURCES... LIBS ... [LABELS ...] [COST seconds] [HEAVY]) builds a gtest binary
# and registers its cases. COST is about how long one case takes: `ctest -j` starts the costly ones
# first, so the long tail of a parallel run is not one slow test started last (ctest keeps
# measured costs in Testing/Temporary/CTestCostData.txt after a first run; a fresh clone has none).
# HEAVY: a case keeps cores busy for long (a real control plane, torch ranks); `make test` runs at
# most three such at once (RESOURCE_GROUPS heavy:1 against tests/resources.json), beside light tests.
# PROPERTIES: more CTest properties for every case (e.g. FIXTURES_REQUIRED, ENVIRONMENT).
function(phalanx_test name)
  cmake_parse_arguments(T "HEAVY" "COST" "SOURCES;LIBS;LABELS;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  phalanx_test_binary_code(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main)
  set(schedule)
  if(T_COST)
    list(APPEND schedule COST ${T_COST})
  endif()
  if(T_HEAVY)
    list(APPEND schedule RESOURCE_GROUPS heavy:1)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${T_LABELS}" ${schedule} ${T_PROPERTIES})
endfunction()

# phalanx_no_unity(FILES...): these sources are compiled on their own in unity builds
# (cmake/build_speed.cmake) because they define, in an anonymous namespace, a name that a
# sibling source of the same target also defines.
function(phalanx_no_unity)
  set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

# phalanx_test_only_code(TARGETS...): code that only tests run but that does real work while they
# run (the fakes, the local cluster: its API front, kubelets and scheduler serve every end-to-end
# test) is compiled with -O1 instead of the build type's -O2. Measured on a 4-file unity batch
# of coordination tests (GCC): -O2 36 s, -O1 22 s, -O0 19 s (-fsyntax-only 8.5 s; a precompiled
# header of gtest/gmock/gRPC/absl saved under 1.5 s of it): the time is template code being
# optimized. What ships (libraries, programs, benchmarks) stays at the build type's level, and
# the tests link those same libraries.
function(phalanx_test_only_code)
  foreach(target ${ARGN})
    target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo,Release,MinSizeRel>:-O1>)
  endforeach()
endfunction()

# phalanx_test_binary_code(TARGETS...): a test binary's own code (the cases: gtest/gmock macros,
# fixtures, literal tables) is compiled with -O0. It only drives the code under test, which it
# links from the libraries above, so optimizing it buys no test speed. Measured with clang on the
# same 4-file batch: -O1 -g1 30.7 s, -O0 -g1 13.1 s (-fsyntax-only 7.9 s): clang's optimizer was
# most of a test batch's time, and test batches are half of the build.
#
# Under clang every test binary also reuses one precompiled header (cmake/test_pch.h: gtest,
# gmock, the standard library, absl), built once by phalanx_test_pch_host with the same flags:
# that batch then takes 9.3 s instead of 14.4 (the PCH itself 5.7 s, once). GCC would need a
# PCH per set of flags and silently ignores a mismatched one, so GCC builds parse as before.
# -DPHALANX_TEST_PCH=OFF turns it off (e.g. to check that every test includes what it uses).
option(PHALANX_TEST_PCH "Test binaries reuse one precompiled header (clang)" ON)
if(PHALANX_TEST_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  add_executable(phalanx_test_pch_host ${CMAKE_CURRENT_LIST_DIR}/test_pch_host.cc)
  target_link_libraries(phalanx_test_pch_host PRIVATE GTest::gmock GTest::gtest_main)
  target_precompile_headers(phalanx_test_pch_host PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_pch.h)
  # -pthread on every user of the PCH: clang refuses a PCH built without it in a unit built
  # with it (gRPC's targets add it), and the other way round.
  target_compile_options(phalanx_test_pch_host
    PRIVATE $<$<CONFIG:RelWithDebInfo,Release,MinSizeRel>:-O0> -pthread)
endif()
function(phalanx_test_binary_code)
  foreach(target ${ARGN})
    target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo,Release,MinSizeRel>:-O0>)
    if(TARGET phalanx_test_pch_host)
      target_precompile_headers(${target} REUSE_FROM phalanx_test_pch_host)
      target_compile_options(${target} PRIVATE -pthread)
    endif()
  endforeach()
endfunction()
