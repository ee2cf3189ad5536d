/* SPDX-License-Identifier: Apache-2.0 */
/* The C API's bad-input paths from C11 (compiled with -std=c11 -pedantic): every call with a
 * null or malformed argument returns chimeraInvalidArgument and sets a message; no collective
 * runs before a communicator exists. The versioned structs' initializers compile as C11. Exits non-zero on the first
 * failed expectation. */
#include <stdio.h>
#include <string.h>

#include "chimera/chimera.h"

static int failures = 0;

static void expect(int condition, const char* what) {
  if (condition) return;
  fprintf(stderr, "capi_c11_test: expectation failed: %s (last error: %s)\n", what, chimeraGetLastError());
  ++failures;
}

int main(void) {
  chimeraComm_t comm = NULL;
  float x = 1.0f;
  expect(chimeraCommInitMpi(NULL, "tp=2") == chimeraInvalidArgument, "null comm pointer");
  expect(chimeraCommInitMpi(&comm, "tp=") == chimeraInvalidArgument, "malformed mesh");
  expect(strlen(chimeraGetLastError()) > 0, "a message after a failure");
  expect(chimeraCommInitMpi(&comm, "tp=2") == chimeraSuccess, "a valid mesh for 2 ranks");
  expect(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, NULL, comm) == chimeraInvalidArgument, "null axes");
  expect(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "tp", comm) == chimeraSuccess, "allreduce");
  expect(x == 2.0f, "the sum of two ones");
  expect(chimeraRedistribute("4,4", chimeraFloat32, "tp=S7", "tp=R", &x, 4, &x, 4, comm) == chimeraInvalidArgument,
         "a layout splitting a dimension the tensor lacks");
  chimeraSession_t session = NULL;
  expect(chimeraSessionBegin(comm, -1, &session) == chimeraSuccess, "a session from the environment");
  chimeraTensor_t t;
  expect(chimeraSessionTensor(session, &x, 4, "4,4", chimeraFloat32, "tp=P", &t) == chimeraInvalidArgument,
         "a buffer smaller than the local tensor");
  chimeraSessionStats_t stats = CHIMERA_SESSION_STATS_INITIALIZER;
  stats.version = CHIMERA_SESSION_STATS_VERSION + 1;
  expect(chimeraSessionGetStats(session, &stats) == chimeraInvalidArgument, "a stats struct of an unknown version");
  stats.version = CHIMERA_SESSION_STATS_VERSION;
  expect(chimeraSessionGetStats(session, &stats) == chimeraSuccess && stats.recordedCalls == 0, "stats");
  expect(chimeraSessionEnd(session) == chimeraSuccess, "end");
  chimeraSessionConfig_t config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.size = sizeof config - 1;
  expect(chimeraSessionBeginConfig(comm, &config, &session) == chimeraInvalidArgument, "a config struct too small");
  config.size = sizeof config;
  config.perRank = 1;
  expect(chimeraSessionBeginConfig(comm, &config, &session) == chimeraSuccess, "a per-rank session");
  expect(chimeraSessionEnd(session) == chimeraSuccess, "end of the per-rank session");
  expect(chimeraCommDestroy(comm) == chimeraSuccess, "destroy");
  chimeraFinalize();
  if (failures == 0) printf("capi_c11_test: all expectations hold\n");
  return failures == 0 ? 0 : 1;
}
