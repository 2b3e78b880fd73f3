# Every third-party dependency comes from a Debian package (scripts/install-deps.sh).
find_package(PkgConfig REQUIRED)
pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
pkg_check_modules(PROTOBUF REQUIRED IMPORTED_TARGET protobuf)
find_program(PROTOC protoc REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

find_package(absl CONFIG REQUIRED)
find_package(Threads REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(cpprestsdk CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(benchmark CONFIG REQUIRED)

# CUDA/NCCL are optional: GPU code builds only where the toolkit is found.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  message(STATUS "phalanx: CUDA ${CUDAToolkit_VERSION} found; GPU code enabled")
else()
  message(STATUS "phalanx: CUDA not found; GPU code skipped")
endif()
