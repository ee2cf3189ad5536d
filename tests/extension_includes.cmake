# SPDX-License-Identifier: Apache-2.0
# What the Python extensions compile (CTest `unit.extension_includes`, `cmake -P`): every
# #include "..." of python/src/ and python/chimera/torch/csrc/ must be a file of the extension's
# own folder, a public header (include/chimera/...), or one of the few private headers of src/
# listed below; nothing from tests/ and no other internal. Their CMake files must not put tests/
# on an include path.
#   -DROOT=<repository root>
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository root> -P extension_includes.cmake")
endif()

# The private headers of src/ an extension may include, and why.
set(allowed
  core/check.hpp                  # the check macros (CHIMERA_CHECK_ARG, CHIMERA_RETURN_IF_ERROR), header-only
  common/hash.hpp                 # the library's one hash (header-only): the gloo transport's group agreement
  common/host_identity.hpp        # where the ranks run: the gloo transport gathers the host keys as the MPI backend does
  common/agreement.hpp            # the agreements the MPI backend runs (new groups, each call's arguments), for the gloo transport's (in libchimera)
  common/env.hpp                  # CHIMERA_CHECK_ARGS read with the MPI backend's default, for the gloo transport (in libchimera)
  tools/plan_report.hpp           # chimera.plan() returns chimera-plan's --json report (plan_report.cpp is compiled in)
  backend/null/null_backend.hpp   # the overhead benchmark's backend that moves no data (python -m chimera.bench)
  mpi/bounded_wait.hpp            # the process group's point-to-point waits, bounded as the MPI backend's
  mpi/abandoned_memory.hpp        # a receive given up on keeps its memory until exit, as in the MPI backend
  job/job_end.hpp                 # ending the job after a Timeout (abortOnTimeout), as the backends do
  job/stall_watchdog.hpp          # bounds MPI_Comm_create_group and MPI_Finalize (watchedBlockingCall)
)
set(extensions python/src python/chimera/torch/csrc)
set(problems "")

foreach(folder IN LISTS extensions)
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${folder}/*.cpp" "${ROOT}/${folder}/*.hpp"
       "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cu" "${ROOT}/${folder}/*.cuh")
  foreach(source IN LISTS sources)
    file(STRINGS "${ROOT}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    get_filename_component(dir "${ROOT}/${source}" DIRECTORY)
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" header "${line}")
      if(EXISTS "${dir}/${header}" OR EXISTS "${ROOT}/${folder}/${header}")
        continue()  # the extension's own file
      endif()
      if(header MATCHES "^chimera/" AND EXISTS "${ROOT}/include/${header}")
        continue()  # public API
      endif()
      if(header IN_LIST allowed AND EXISTS "${ROOT}/src/${header}")
        continue()
      endif()
      if(EXISTS "${ROOT}/tests/${header}")
        list(APPEND problems "${source}: includes \"${header}\" from tests/ (test code must not ship)")
      elseif(EXISTS "${ROOT}/src/${header}")
        list(APPEND problems "${source}: includes the internal \"${header}\" (src/${header}): use the public API "
                             "or add it to the allowed list of tests/extension_includes.cmake with the reason")
      else()
        list(APPEND problems "${source}: includes \"${header}\", which is neither its own, public, nor allowed")
      endif()
    endforeach()
  endforeach()
endforeach()
foreach(list_file python/CMakeLists.txt python/chimera/torch/csrc/CMakeLists.txt)
  file(STRINGS "${ROOT}/${list_file}" lines REGEX "include_directories.*tests")
  foreach(line IN LISTS lines)
    list(APPEND problems "${list_file}: puts tests/ on an include path: ${line}")
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "the Python extensions include what they must not:\n  ${text}")
endif()
message(STATUS "extension includes: every include of ${extensions} is its own, public or allowed")
