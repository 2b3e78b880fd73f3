include(GoogleTest)

# phalanx_test(NAME SOURCES... LIBS ... [LABELS ...]) builds a gtest binary and registers its cases.
function(phalanx_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()

# phalanx_no_unity(FILES...): these sources are compiled on their own in unity builds
# (cmake/build_speed.cmake) because they define, in an anonymous namespace, a name that a
# sibling source of the same target also defines.
function(phalanx_no_unity)
  set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
