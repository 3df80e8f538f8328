# Decides whether the CUDA backend is built. The backend itself arrives with the CUDA issue; this
# file only resolves the QMOE_CUDA switch so the choice is visible and an explicit ON fails early.
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
message(STATUS "qmoe: CUDA backend ${QMOE_HAVE_CUDA} (QMOE_CUDA=${QMOE_CUDA})")
