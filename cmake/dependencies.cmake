# Every third-party dependency comes from a Debian package (scripts/install-deps.sh).
# gRPC through its CMake package (gRPC::grpc++, which brings protobuf::libprotobuf): 0.6 s. The
# pkg-config route (pkg_check_modules(grpc++)) took 23 of configure's 33 s: ~18 pkg-config runs,
# each resolving grpc++'s whole graph of absl modules. Debian's gRPC package names
# protobuf::libprotobuf without finding it: CMake's FindProtobuf module provides it.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
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
