# SPDX-License-Identifier: Apache-2.0
# Runs a tool that must fail before doing any work (CTest driver, `cmake -P`):
#   -DCOMMAND="a|b|..."   the command line ('|' separates arguments)
#   -DEXPECT_ERROR=regex  what its output must contain
#   -DMAX_SECONDS=N       how long the failure may take
string(REPLACE "|" ";" command "${COMMAND}")
string(TIMESTAMP start "%s" UTC)
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP end "%s" UTC)
math(EXPR seconds "${end} - ${start}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, got exit 0:\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_ERROR}")
  message(FATAL_ERROR "output does not match '${EXPECT_ERROR}':\n${out}${err}")
endif()
if(seconds GREATER MAX_SECONDS)
  message(FATAL_ERROR "took ${seconds} s to fail (at most ${MAX_SECONDS} s allowed)")
endif()
