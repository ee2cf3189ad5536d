# SPDX-License-Identifier: Apache-2.0
# What the source checks (layering.cmake, env_vars.cmake) share: the planted lines
# (-DPLANT=<file>:<line>[|...] makes a check read each file as if it also held that line, so that a
# test can show the check failing on a violation planted in a real file without writing the file)
# and the failure that lists every problem found.

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

# Fails with "<count> <what>:" and one problem a line, when `problems` (a list) has any.
function(chimera_fail_on_problems problems what)
  if(problems)
    list(LENGTH problems count)
    string(REPLACE ";" "\n  " text "${problems}")
    message(FATAL_ERROR "${count} ${what}:\n  ${text}")
  endif()
endfunction()
