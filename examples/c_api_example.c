/* SPDX-License-Identifier: Apache-2.0 */
/* The C API from C11: a communicator from MPI, a plain AllReduce, and a session that records
 * a tensor-parallel AllReduce followed by a pipeline hand-off (TP+PP on pp=2,tp=4), run once
 * with fusion off and once on, the results compared.
 * Run: mpirun -np 8 c_api_example [rows] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chimera/chimera.h"

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    chimeraResult_t r_ = (call);                                                                        \
    if (r_ != chimeraSuccess) {                                                                         \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, chimeraGetErrorString(r_), chimeraGetLastError()); \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

enum { kCols = 64 };

/* One step: AllReduce over tp on stage 0, send to stage 1, stage 1 reads it replicated. */
static void step(chimeraSession_t session, int rank, int rows, float* input, float* output) {
  const int stage0 = rank < 4;
  char shape[32];
  snprintf(shape, sizeof shape, "%d,%d", rows, kCols);
  const size_t bytes = (size_t)rows * kCols * sizeof(float);
  for (int i = 0; stage0 && i < rows * kCols; ++i) input[i] = (float)((i + rank) % 9);
  chimeraTensor_t x, summed, handed;
  CHECK(chimeraSessionTensor(session, stage0 ? input : NULL, stage0 ? bytes : 0, shape, chimeraFloat32, "pp=@0,tp=P",
                             &x));
  CHECK(chimeraSessionRecord(session, "allreduce:tp", x, NULL, 0, &summed));
  CHECK(chimeraSessionRecord(session, "send:pp", summed, stage0 ? NULL : output, stage0 ? 0 : bytes, &handed));
  CHECK(chimeraSessionConsume(session, handed, "pp=@1,tp=R"));
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? atoi(argv[1]) : 256;
  chimeraComm_t comm;
  CHECK(chimeraCommInitMpi(&comm, "pp=2,tp=4"));
  int rank = 0;
  CHECK(chimeraCommRank(comm, &rank));

  /* A plain collective: the sum of the ranks over the whole world. */
  float value = (float)rank;
  CHECK(chimeraAllReduce(&value, &value, 1, chimeraFloat32, chimeraSum, "pp+tp", comm));

  const size_t count = (size_t)rows * kCols;
  float* input = calloc(count, sizeof(float));
  float* unfused = calloc(count, sizeof(float));
  float* fused = calloc(count, sizeof(float));
  chimeraSession_t off, on;
  CHECK(chimeraSessionBegin(comm, 0, &off));
  /* The same with a configuration: versioned structs start from their initializer. */
  chimeraSessionConfig_t config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.fusion = 1;
  CHECK(chimeraSessionBeginConfig(comm, &config, &on));
  step(off, rank, rows, input, unfused);
  step(on, rank, rows, input, fused);
  int same = memcmp(unfused, fused, count * sizeof(float)) == 0 && value == 28.0f;
  CHECK(chimeraAllReduce(&same, &same, 1, chimeraInt32, chimeraMin, "pp+tp", comm));
  chimeraSessionStats_t a = CHIMERA_SESSION_STATS_INITIALIZER, b = CHIMERA_SESSION_STATS_INITIALIZER;
  CHECK(chimeraSessionGetStats(off, &a));
  CHECK(chimeraSessionGetStats(on, &b));
  if (rank == 0) {
    printf("C API: allreduce:tp + send:pp on %dx%d f32: fusion off %llu bytes, on %llu bytes (%llu fused), %s\n", rows,
           kCols, (unsigned long long)a.bytesSent, (unsigned long long)b.bytesSent, (unsigned long long)b.fusedChains,
           same ? "results identical" : "RESULTS DIFFER");
  }
  CHECK(chimeraSessionEnd(off));
  CHECK(chimeraSessionEnd(on));
  CHECK(chimeraCommDestroy(comm));
  free(input);
  free(unfused);
  free(fused);
  chimeraFinalize();
  return same ? 0 : 1;
}
