include(GoogleTest)

# phalanx_test(NAME SOURCES... LIBS ... [LABELS ...] [COST seconds] [HEAVY]) builds a gtest binary
# and registers its cases. COST is about how long one case takes: `ctest -j` starts the costly ones
# first, so the long tail of a parallel run is not one slow test started last (ctest keeps
# measured costs in Testing/Temporary/CTestCostData.txt after a first run; a fresh clone has none).
# HEAVY: a case keeps cores busy for long (a real control plane, torch ranks); `make test` runs at
# most two such at once (RESOURCE_GROUPS heavy:1 against tests/resources.json), beside light tests.
function(phalanx_test name)
  cmake_parse_arguments(T "HEAVY" "COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main)
  set(schedule)
  if(T_COST)
    list(APPEND schedule COST ${T_COST})
  endif()
  if(T_HEAVY)
    list(APPEND schedule RESOURCE_GROUPS heavy:1)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}" ${schedule})
endfunction()

# phalanx_no_unity(FILES...): these sources are compiled on their own in unity builds
# (cmake/build_speed.cmake) because they define, in an anonymous namespace, a name that a
# sibling source of the same target also defines.
function(phalanx_no_unity)
  set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
