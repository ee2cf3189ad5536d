# SPDX-License-Identifier: Apache-2.0
# The planted lines of the source checks (layering.cmake, env_vars.cmake): -DPLANT=<file>:<line>[|...]
# makes a check read each file as if it also held that line, so that a test can show the check
# failing on a violation planted in a real file without writing the file.

# Appends to `out_var` the lines PLANT plants in `source` (a path relative to the root).
function(chimera_planted_lines source out_var)
  set(lines ${${out_var}})
  string(REPLACE "|" ";" plants "${PLANT}")
  foreach(plant IN LISTS plants)
    if(plant MATCHES "^${source}:(.+)$")
      list(APPEND lines "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out_var} "${lines}" PARENT_SCOPE)
endfunction()
