# Decides whether the CUDA backend is built (QMOE_CUDA=AUTO|ON|OFF) and sets its flags: one
# architecture (sm_90a), C++20 passed to nvcc by hand (CMake 3.25 does not know cuda_std_20).
set(QMOE_HAVE_CUDA OFF)
if(NOT QMOE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(QMOE_HAVE_CUDA ON)
  elseif(QMOE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QMOE_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

if(QMOE_HAVE_CUDA)
  set(QMOE_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a" CACHE STRING "nvcc -gencode flags")
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} ${QMOE_CUDA_GENCODE} -lineinfo --expt-relaxed-constexpr")
  enable_language(CUDA)
  # CMake 3.25 has no flag for the CUDA C++20 dialect the targets inherit from CXX_STANDARD 20:
  # tell it nvcc's (CMake >= 3.26 knows it already).
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  find_package(CUDAToolkit REQUIRED)
  # CUTLASS headers for the prefill grouped GEMMs (PyPI's nvidia-cutlass, unpacked by
  # tools/fetch_cutlass.sh, which tools/setup.sh runs when nvcc is present).
  set(QMOE_CUTLASS_DIR "${PROJECT_SOURCE_DIR}/.deps/cutlass-4.2.0.0" CACHE PATH "CUTLASS source tree (include/, tools/util/include/)")
  if(NOT EXISTS "${QMOE_CUTLASS_DIR}/include/cutlass/cutlass.h")
    message(FATAL_ERROR "CUTLASS headers not found in ${QMOE_CUTLASS_DIR}: run tools/fetch_cutlass.sh "
                        "(tools/setup.sh does) or set QMOE_CUTLASS_DIR")
  endif()
  if(QMOE_CCACHE)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${QMOE_CCACHE})
  endif()
endif()
message(STATUS "qmoe: CUDA backend ${QMOE_HAVE_CUDA} (QMOE_CUDA=${QMOE_CUDA})")
