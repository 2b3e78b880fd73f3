# Under clang every library of the project reuses one precompiled header (cmake/library_pch.h:
# the standard library, absl, cpprest), built once by phalanx_library_pch_host. The libraries
# (-O2, or -O1 for test-only code) spend most of their compile time parsing those headers: the
# three unity batches of phalanx_kube took 32.4 s, 17.1 s with the header precompiled (9.5 s,
# once). Clang refuses a PCH whose -pthread or PIE setting differs from the unit's, so the host
# and every library get -pthread, and programs (PIE) are left out: their own code is small.
# Test binaries have their own (cmake/test_pch.h). -DPHALANX_LIBRARY_PCH=OFF turns it off (e.g.
# to check that every library includes what it uses; the asan and tsan presets do: unoptimized,
# every library would carry the header's inline functions, asio's OpenSSL error strings among
# them, and fail to link without OpenSSL); GCC builds do without it.
option(PHALANX_LIBRARY_PCH "Libraries reuse one precompiled header (clang)" ON)
if(PHALANX_LIBRARY_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  add_library(phalanx_library_pch_host OBJECT ${CMAKE_CURRENT_LIST_DIR}/library_pch_host.cc)
  target_link_libraries(phalanx_library_pch_host PRIVATE
    cpprestsdk::cpprest absl::status absl::statusor absl::strings absl::synchronization absl::time
    absl::flat_hash_map)
  target_precompile_headers(phalanx_library_pch_host PRIVATE ${CMAKE_CURRENT_LIST_DIR}/library_pch.h)
  target_compile_options(phalanx_library_pch_host PRIVATE -pthread)
endif()

# phalanx_reuse_library_pch(DIRECTORY): every library target defined in DIRECTORY and below
# reuses the library PCH. Called once, at the end of the top-level CMakeLists.txt, so that no
# add_library needs to remember it.
function(phalanx_reuse_library_pch dir)
  if(NOT TARGET phalanx_library_pch_host)
    return()
  endif()
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
    # A library with its own symbol visibility (the C ABI's libphalanx_c) cannot use the PCH.
    get_target_property(visibility ${target} CXX_VISIBILITY_PRESET)
    if(type MATCHES "^(STATIC|SHARED|MODULE|OBJECT)_LIBRARY$" AND NOT reused AND NOT visibility
       AND NOT target STREQUAL "phalanx_library_pch_host")
      target_precompile_headers(${target} REUSE_FROM phalanx_library_pch_host)
      target_compile_options(${target} PRIVATE -pthread)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir ${subdirs})
    phalanx_reuse_library_pch(${subdir})
  endforeach()
endfunction()
