# SPDX-License-Identifier: Apache-2.0
# Fails when libchimera links an NCCL symbol newer than NCCL 2.7: such a symbol makes the
# dynamic loader refuse libchimera (and everything linking it) on a machine with an older
# libnccl.so.2, instead of the backend reporting Unsupported. Newer entry points are looked
# up at run time (src/nccl/nccl_api.cpp). Run with -DNM=... -DLIBRARY=...
cmake_policy(SET CMP0057 NEW)
set(allowed
  ncclAllGather ncclAllReduce ncclBroadcast ncclCommAbort ncclCommCount ncclCommDestroy
  ncclCommGetAsyncError ncclGetErrorString ncclGetUniqueId ncclGetVersion ncclGroupEnd
  ncclGroupStart ncclRecv ncclReduce ncclReduceScatter ncclSend ncclCommInitRank
  ncclCommCuDevice ncclCommUserRank)
execute_process(COMMAND ${NM} -D --undefined-only ${LIBRARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${NM} failed on ${LIBRARY}")
endif()
string(REGEX MATCHALL "U (p?nccl[A-Za-z0-9_]+)" references "${symbols}")
set(checked 0)
set(bad "")
foreach(reference IN LISTS references)
  string(REGEX REPLACE "^U " "" name "${reference}")
  math(EXPR checked "${checked} + 1")
  if(NOT name IN_LIST allowed)
    list(APPEND bad ${name})
  endif()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no NCCL symbol referenced by ${LIBRARY}: is it the CUDA build?")
endif()
if(bad)
  message(FATAL_ERROR "libchimera links NCCL symbols newer than 2.7 (look them up at run time): ${bad}")
endif()
message(STATUS "${checked} NCCL symbols referenced, all present since NCCL 2.7")
