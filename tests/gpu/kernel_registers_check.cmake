# SPDX-License-Identifier: Apache-2.0
# Compiles kernels/pack.cu with ptxas verbose output for each architecture the build targets
# and fails when the pack/unpack kernel uses more than MAX_REGISTERS registers or spills:
# register use decides how many blocks an SM holds (see kMinBlocksPerSm in pack.cu).
# Run with -DNVCC=... -DSOURCE_DIR=... -DARCHS=89;90 -DMAX_REGISTERS=64 -DOUT=...
cmake_policy(SET CMP0057 NEW)
set(gencode "")
foreach(arch IN LISTS ARCHS)
  string(REGEX REPLACE "-.*" "" number "${arch}")
  if(number MATCHES "^[0-9]+$")  # native/all/all-major: checked at the default archs below
    list(APPEND gencode -gencode arch=compute_${number},code=sm_${number})
  endif()
endforeach()
if(NOT gencode)
  set(gencode -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90)
endif()
execute_process(
  COMMAND ${NVCC} -std=c++17 --expt-relaxed-constexpr -O3 -Xptxas -v ${gencode}
          -I${SOURCE_DIR} -I${SOURCE_DIR}/src -I${SOURCE_DIR}/include
          -c ${SOURCE_DIR}/kernels/pack.cu -o ${OUT}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "nvcc failed:\n${err}")
endif()
string(REPLACE "\n" ";" lines "${out}${err}")
set(inKernel FALSE)
set(kernels 0)
foreach(line IN LISTS lines)
  if(line MATCHES "Compiling entry function '([^']+)' for '(sm_[0-9]+)'")
    set(inKernel FALSE)
    set(current "${CMAKE_MATCH_2}")
    if(CMAKE_MATCH_1 MATCHES "boxCopyKernel")
      set(inKernel TRUE)
    endif()
  elseif(inKernel AND line MATCHES "([0-9]+) bytes spill stores")
    if(NOT CMAKE_MATCH_1 EQUAL 0)
      message(FATAL_ERROR "boxCopyKernel spills on ${current}: ${line}")
    endif()
  elseif(inKernel AND line MATCHES "Used ([0-9]+) registers")
    math(EXPR kernels "${kernels} + 1")
    if(CMAKE_MATCH_1 GREATER MAX_REGISTERS)
      message(FATAL_ERROR "boxCopyKernel uses ${CMAKE_MATCH_1} registers on ${current} (limit ${MAX_REGISTERS})")
    endif()
  endif()
endforeach()
if(kernels EQUAL 0)
  message(FATAL_ERROR "no boxCopyKernel in the ptxas output:\n${err}")
endif()
message(STATUS "${kernels} boxCopyKernel instantiations, each <= ${MAX_REGISTERS} registers, no spills")
