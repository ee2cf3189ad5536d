/* SPDX-License-Identifier: Apache-2.0 */
/* The C API of chimera, NCCL-style: opaque handles, a result code on every call, text for
 * meshes, axes, layouts and chain ops (the same text as chimera-plan). Compiles as C11 and C++.
 * Every collective is collective over its group as in chimera::Backend; session calls record
 * locally, and chimeraSessionFlush, chimeraSessionConsume and chimeraSessionConsumeRange are
 * collective: over the world for an SPMD session, over the window's groups and its hand-off
 * peers for a per-rank session (chimeraSessionBeginConfig).
 * Handles are checked against a registry of live ones: a null, destroyed or foreign handle is
 * chimeraInvalidArgument, never a dereference. Counts whose byte size (times the group size
 * where the buffer holds every rank's block) overflows are chimeraInvalidArgument. No C++
 * exception crosses this API (out of memory is chimeraBackendError). A buffer shorter than its
 * count cannot be detected through a raw pointer and remains the caller's responsibility. */
#ifndef CHIMERA_CHIMERA_H_
#define CHIMERA_CHIMERA_H_

#include <stddef.h>
#include <stdint.h>

/** The version of this header: major * 10000 + minor * 100 + patch (as NCCL_VERSION_CODE). */
#define CHIMERA_MAJOR 0
#define CHIMERA_MINOR 1
#define CHIMERA_PATCH 0
#define CHIMERA_VERSION_CODE (CHIMERA_MAJOR * 10000 + CHIMERA_MINOR * 100 + CHIMERA_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every call (mirrors chimera::StatusCode). */
typedef enum {
  chimeraSuccess = 0,         /**< success */
  chimeraInvalidArgument = 1, /**< malformed input: null pointer, bad text, buffer too small */
  chimeraUnsupported = 2,     /**< well-formed but not available in this build (e.g. NCCL without CUDA) */
  chimeraMismatch = 3,        /**< ranks disagree (counts, windows, plans); returned on every rank */
  chimeraBackendError = 4,    /**< MPI, NCCL or CUDA failed */
  chimeraTimeout = 5,         /**< an operation stopped making progress */
  chimeraInternalError = 6    /**< a bug in chimera */
} chimeraResult_t;

/** Element types (mirror chimera::DataType). */
typedef enum {
  chimeraFloat32 = 0,
  chimeraFloat64 = 1,
  chimeraFloat16 = 2,
  chimeraBfloat16 = 3,
  chimeraInt32 = 4,
  chimeraInt64 = 5,
  chimeraUint8 = 6
} chimeraDataType_t;

/** Reduction operators (mirror chimera::ReduceOp). */
typedef enum { chimeraSum = 0, chimeraProd = 1, chimeraMin = 2, chimeraMax = 3, chimeraAvg = 4 } chimeraRedOp_t;

/** The direction of a pipeline hand-off along an axis (the chain ops "send:AX" and
 * "send:AX:backward"). */
typedef enum {
  chimeraForward = 0, /**< from stage k to stage k+1 (the forward pass) */
  chimeraBackward = 1 /**< from stage k to stage k-1 (the backward pass) */
} chimeraDirection_t;

/* Handles. Every handle below is a number the library's registry gives out, not an address: it
 * is never reused (a 64-bit generation), so a handle that was destroyed, destroyed twice, never
 * made, or of another kind is chimeraInvalidArgument in every call that takes it, even when a
 * newer handle's object lives where the old one's did. */
/** A communicator: a backend bound to a mesh. */
typedef struct chimeraComm* chimeraComm_t;
/** A recording session on a communicator. */
typedef struct chimeraSession* chimeraSession_t;
/** A value a session tracks (see chimera::TensorHandle); expires at the next flush. */
typedef struct {
  uint32_t index;
  uint64_t window;
} chimeraTensor_t;
/** Rendezvous token of a communicator created without MPI (an NCCL unique id). */
typedef struct {
  char internal[128];
} chimeraUniqueId;
/* Versioned structs. A struct the caller passes in or fills carries, first, its size as the
 * caller compiled it, a magic number and its layout version, as NCCL's ncclConfig_t does:
 * declare it with its initializer (e.g. `chimeraSessionConfig_t c =
 * CHIMERA_SESSION_CONFIG_INITIALIZER;`), never by listing fields. A library built from a newer
 * header reads and writes only the fields of the caller's version; a struct without the magic
 * (not initialised with its initializer), of a version the library does not know, or smaller
 * than its version's layout is chimeraInvalidArgument with a message naming the struct. */
/** Marks a struct initialised with its initializer. */
#define CHIMERA_STRUCT_MAGIC 0x63686d72u
/** The layout version of chimeraSessionStats_t this header declares. */
#define CHIMERA_SESSION_STATS_VERSION 2
/** The layout version of chimeraSessionConfig_t this header declares. */
#define CHIMERA_SESSION_CONFIG_VERSION 2

/** Session counters (see chimera::SessionStats), filled by chimeraSessionGetStats. */
typedef struct {
  size_t size;          /**< sizeof(chimeraSessionStats_t) (set by the initializer) */
  unsigned int magic;   /**< CHIMERA_STRUCT_MAGIC (set by the initializer) */
  unsigned int version; /**< CHIMERA_SESSION_STATS_VERSION (set by the initializer) */
  uint64_t recordedCalls;
  uint64_t windows;
  uint64_t windowCacheHits;
  uint64_t chainsRun;
  uint64_t fusedChains;
  uint64_t bytesAsRecorded;
  uint64_t bytesSent;
  uint64_t rankBytesAsRecorded; /**< this rank's share of bytesAsRecorded (per-rank sessions fill only these) */
  uint64_t rankBytesSent;       /**< this rank's share of bytesSent */
  uint64_t agreements;          /**< agreement collectives and hand-off exchanges run */
  /* Version 2: */
  uint64_t localCopies;    /**< local copies made (packs, unpacks, copies, the session's staging) */
  uint64_t localCopyBytes; /**< their bytes */
} chimeraSessionStats_t;
/** A chimeraSessionStats_t ready to be filled: its header set, every counter 0. */
#define CHIMERA_SESSION_STATS_INITIALIZER                                                                             \
  {                                                                                                                   \
    sizeof(chimeraSessionStats_t), CHIMERA_STRUCT_MAGIC, CHIMERA_SESSION_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
        0, 0                                                                                                          \
  }

/** How a session records (see chimera::SessionOptions), read by chimeraSessionBeginConfig. */
typedef struct {
  size_t size;          /**< sizeof(chimeraSessionConfig_t) (set by the initializer) */
  unsigned int magic;   /**< CHIMERA_STRUCT_MAGIC (set by the initializer) */
  unsigned int version; /**< CHIMERA_SESSION_CONFIG_VERSION (set by the initializer) */
  int fusion;           /**< 1 fuse, 0 run exactly the recorded calls, -1 from CHIMERA_FUSION (the default) */
  int perRank;          /**< 1: each rank records only its own calls (chimeraSessionRecv for hand-offs); default 0 */
  int checkEveryWindow; /**< 1 agree at every flush, 0 only on first sight, -1 from CHIMERA_CHECK_EVERY_WINDOW (the
                         * default)
                         */
  void* stream;         /**< the stream the session's work is ordered on (cudaStream_t); NULL (the default): the
                             communicator's stream when the session begins (chimeraCommSetStream) */
  /* Version 2: */
  const char* topology; /**< the cost model (see chimera::SessionOptions::topology): "bytes", a preset ("host:8",
                             "pcie-4080x8", ...) or a profile file; NULL (the default): CHIMERA_TOPOLOGY, else the
                             backend's own (host:N on MPI, bytes on NCCL). Read when the session begins. */
} chimeraSessionConfig_t;
/** A chimeraSessionConfig_t with its header set and every field at its default. */
#define CHIMERA_SESSION_CONFIG_INITIALIZER \
  { sizeof(chimeraSessionConfig_t), CHIMERA_STRUCT_MAGIC, CHIMERA_SESSION_CONFIG_VERSION, -1, 0, -1, NULL, NULL }

/** A static description of `result` ("invalid argument", ...). */
const char* chimeraGetErrorString(chimeraResult_t result);
/** The message of the last failed call on this thread (names the problem and its values). */
const char* chimeraGetLastError(void);

/** Creates an MPI communicator (host memory) over MPI_COMM_WORLD for `mesh` ("pp=2,tp=4"),
 * initialising MPI if needed. Collective over the world. chimeraUnsupported without MPI. */
chimeraResult_t chimeraCommInitMpi(chimeraComm_t* comm, const char* mesh);
/** Creates a fresh unique id on one rank (NCCL); distribute it yourself.
 * chimeraUnsupported when chimera was built without CUDA. */
chimeraResult_t chimeraGetUniqueId(chimeraUniqueId* id);
/** Creates an NCCL communicator (device memory) for world rank `rank` of `mesh`, driving CUDA
 * device `device`, from `id`. Collective. chimeraUnsupported without CUDA. */
chimeraResult_t chimeraCommInitRank(chimeraComm_t* comm, const char* mesh, int rank, int device, chimeraUniqueId id);
/** Frees a communicator. NULL is a no-op. chimeraInvalidArgument (nothing freed) while sessions or
 * routed exchanges on it are live, or when `comm` is not a live handle (destroyed already, or
 * never created). */
chimeraResult_t chimeraCommDestroy(chimeraComm_t comm);
/** This process's world rank. */
chimeraResult_t chimeraCommRank(chimeraComm_t comm, int* rank);
/** The number of ranks of the communicator's mesh. */
chimeraResult_t chimeraCommSize(chimeraComm_t comm, int* size);
/** Finalises MPI if chimera initialised it. */
void chimeraFinalize(void);

/* Plain collectives on the group along `axes` ("tp", "dp+tp"); counts in elements; semantics,
 * in-place rules and errors as chimera::Backend. Collective over the group. */
/** recvbuff[i] = op over the group of sendbuff[i]. */
chimeraResult_t chimeraAllReduce(const void* sendbuff, void* recvbuff, size_t count, chimeraDataType_t datatype,
                                 chimeraRedOp_t op, const char* axes, chimeraComm_t comm);
/** Member g receives block g (recvcount elements) of the reduction. */
chimeraResult_t chimeraReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, chimeraDataType_t datatype,
                                     chimeraRedOp_t op, const char* axes, chimeraComm_t comm);
/** recvbuff = the members' sendbuffs, concatenated by group index. */
chimeraResult_t chimeraAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, chimeraDataType_t datatype,
                                 const char* axes, chimeraComm_t comm);
/** Block j of member i's sendbuff lands in block i of member j's recvbuff (out of place). */
chimeraResult_t chimeraAllToAll(const void* sendbuff, void* recvbuff, size_t countPerPeer, chimeraDataType_t datatype,
                                const char* axes, chimeraComm_t comm);
/** The member with group index `root` copies its sendbuff into every member's recvbuff. */
chimeraResult_t chimeraBroadcast(const void* sendbuff, void* recvbuff, size_t count, chimeraDataType_t datatype,
                                 int root, const char* axes, chimeraComm_t comm);
/** Point-to-point send to world rank `peer`. */
chimeraResult_t chimeraSend(const void* sendbuff, size_t count, chimeraDataType_t datatype, int peer,
                            chimeraComm_t comm);
/** Point-to-point receive from world rank `peer`. */
chimeraResult_t chimeraRecv(void* recvbuff, size_t count, chimeraDataType_t datatype, int peer, chimeraComm_t comm);

/** Moves a tensor of `shape` ("64,32") placed as layout `from` into layout `to` by the
 * cheapest plan (cached), priced as a session prices (CHIMERA_TOPOLOGY, else the backend's own
 * model: host:N on MPI, bytes on NCCL). Collective over the world; buffers are this rank's
 * local tensors. */
chimeraResult_t chimeraRedistribute(const char* shape, chimeraDataType_t datatype, const char* from, const char* to,
                                    const void* input, size_t inputBytes, void* output, size_t outputBytes,
                                    chimeraComm_t comm);

/** Begins a session. `fusion`: 1 on, 0 off (runs exactly the recorded calls), -1 from the
 * environment (CHIMERA_FUSION, CHIMERA_CHECK_EVERY_WINDOW). Its work is ordered on the
 * communicator's stream of this moment (chimeraCommSetStream). */
chimeraResult_t chimeraSessionBegin(chimeraComm_t comm, int fusion, chimeraSession_t* session);
/** Describes a tensor: logical `shape`, placed as `layout`, this rank's part in `buffer`. */
chimeraResult_t chimeraSessionTensor(chimeraSession_t session, void* buffer, size_t bytes, const char* shape,
                                     chimeraDataType_t datatype, const char* layout, chimeraTensor_t* out);
/** Records one call given as chain-op text ("allreduce:tp", "send:pp", "send:pp:backward",
 * "alltoall:ep:0:1", "reducescatter:tp:0", "allgather:sp:1", "slice:tp:0", "broadcast:dp:0"),
 * "send:pp:backward" being the backward hand-off to the previous stage. Out-of-place
 * calls write `output` (`outputBytes` long; NULL/0 on a rank that receives nothing); in-place
 * calls (allreduce, broadcast) ignore it. */
chimeraResult_t chimeraSessionRecord(chimeraSession_t session, const char* op, chimeraTensor_t input, void* output,
                                     size_t outputBytes, chimeraTensor_t* out);
/** Declares that the next computation reads `t` as `layout`, then flushes. */
chimeraResult_t chimeraSessionConsume(chimeraSession_t session, chimeraTensor_t t, const char* layout);
/** Declares without flushing. */
chimeraResult_t chimeraSessionDeclareRead(chimeraSession_t session, chimeraTensor_t t, const char* layout);
/** Declares that this rank's next computation reads only bytes [offset, offset + bytes) of
 * `t`'s buffer (0 bytes: nothing), then flushes. The ranks agree on the smallest layout that
 * holds every rank's range. */
chimeraResult_t chimeraSessionConsumeRange(chimeraSession_t session, chimeraTensor_t t, size_t offset, size_t bytes);
/** The byte-range declaration without the flush. */
chimeraResult_t chimeraSessionDeclareReadRange(chimeraSession_t session, chimeraTensor_t t, size_t offset,
                                               size_t bytes);
/** Plans (or looks up) and runs the recorded window. */
chimeraResult_t chimeraSessionFlush(chimeraSession_t session);
/** Counters since the session began, into `stats` (initialised with
 * CHIMERA_SESSION_STATS_INITIALIZER; see "Versioned structs"). */
chimeraResult_t chimeraSessionGetStats(chimeraSession_t session, chimeraSessionStats_t* stats);
/** Ends a session (unflushed calls are dropped). NULL is a no-op; a session that is not live
 * (ended already, or never begun) is chimeraInvalidArgument. */
chimeraResult_t chimeraSessionEnd(chimeraSession_t session);

/** The library's version, CHIMERA_VERSION_CODE of the build (compare with the header's). */
chimeraResult_t chimeraGetVersion(int* version);
/** Creates the communicators of the groups in `groups`, axis sets separated by ';'
 * ("tp;pp;dp+tp"). Collective over the world, once at setup; a per-rank session needs every
 * group it uses created this way. */
chimeraResult_t chimeraCommCreateGroups(chimeraComm_t comm, const char* groups);
/** Sets the communicator's stream (cudaStream_t; NULL the legacy default stream): the
 * stream its later plain collectives, send/recv and chimeraRedistribute are ordered on, that
 * chimeraCommSynchronize waits for, and that a session begun afterwards without a stream of its
 * own takes. Sessions begun before keep theirs (chimeraSessionSetStream moves one). It is
 * state of this handle only: the backend below keeps no stream. Host communicators ignore it. */
chimeraResult_t chimeraCommSetStream(chimeraComm_t comm, void* stream);
/** Waits until every call issued on the communicator's stream (chimeraCommSetStream) completed. */
chimeraResult_t chimeraCommSynchronize(chimeraComm_t comm);
/** Begins a session configured by `config` (initialised with CHIMERA_SESSION_CONFIG_INITIALIZER,
 * then changed; see "Versioned structs"). NULL: as chimeraSessionBegin(comm, -1, ...). */
chimeraResult_t chimeraSessionBeginConfig(chimeraComm_t comm, const chimeraSessionConfig_t* config,
                                          chimeraSession_t* session);
/** Per-rank sessions: this rank's receiving side of a hand-off along `axis` ("pp"): the
 * tensor of `shape` arrives placed as `layout` (this rank's stage) into `buffer`;
 * `direction` chimeraForward receives a "send:AX" of the previous stage, chimeraBackward a
 * "send:AX:backward" of the next. */
chimeraResult_t chimeraSessionRecv(chimeraSession_t session, const char* shape, chimeraDataType_t datatype,
                                   const char* layout, const char* axis, chimeraDirection_t direction, void* buffer,
                                   size_t bytes, chimeraTensor_t* out);
/** Sets the stream the session's work is ordered on from its next flush (NULL: the legacy
 * default stream). */
chimeraResult_t chimeraSessionSetStream(chimeraSession_t session, void* stream);

/* ---- Routed exchange of MoE layers (see chimera::RoutedExchange, docs/moe.md) ---- */

/** A routed exchange (top-k dispatch and combine) over a group of a communicator. Like every
 * handle of this header it is a registry number, not an address: a handle that was destroyed,
 * destroyed twice, never made, or of another kind is chimeraInvalidArgument in every call. */
typedef struct chimeraRoutedExchange* chimeraRoutedExchange_t;
/** The state of one routed dispatch, which combine and both backwards reuse. It belongs to the
 * exchange that made it: passing it to another exchange is chimeraInvalidArgument on this rank,
 * before the call's first message; the failure is announced to every rank (on the MPI backend
 * a fault notice, docs/reliability.md), so that a peer waiting in the call fails at once. */
typedef struct chimeraRoutedHandle* chimeraRoutedHandle_t;
/** The layout version of chimeraRoutedOptions_t this header declares. */
#define CHIMERA_ROUTED_OPTIONS_VERSION 1
/** Options of a routed exchange (see chimera::RoutedExchangeOptions): declare it with
 * CHIMERA_ROUTED_OPTIONS_INITIALIZER, then set fields (see "Versioned structs"). */
typedef struct {
  size_t size;                  /**< sizeof(chimeraRoutedOptions_t) (set by the initializer) */
  unsigned int magic;           /**< CHIMERA_STRUCT_MAGIC (set by the initializer) */
  unsigned int version;         /**< CHIMERA_ROUTED_OPTIONS_VERSION (set by the initializer) */
  int64_t numExperts;           /**< E, placed in contiguous blocks of E/R over the group */
  int topK;                     /**< K, in [1, E] */
  int64_t hidden;               /**< H, elements per token row */
  chimeraDataType_t datatype;   /**< of the rows: chimeraFloat32 (default), chimeraFloat64, chimeraFloat16 or
                                     chimeraBfloat16 */
  chimeraDataType_t weightType; /**< of the weights: as datatype */
  const char* group;            /**< dispatch axes ("ep", "ep+tp"); NULL (default): every axis */
  const char* tokenLayout;      /**< "", "tp=S0", "tp=R", "tp=P", "pp=@k"; NULL (default): "" */
  int64_t capacity;             /**< tokens per (source, destination rank); 0 (default): dropless */
  int dropOverflow;             /**< capacity mode: 1 (default) drop and count, 0 fail */
  int program;                  /**< 0 (default) planned, 1 fused, 2 per (token, expert) */
  size_t scratchLimitBytes;     /**< 0 (default): CHIMERA_ROUTED_SCRATCH_LIMIT_BYTES, else 16 GiB */
  const char* topology;         /**< the cost model of the planned program ("bytes", a preset or a profile
                                     file); NULL (default): CHIMERA_TOPOLOGY, else the backend's own */
} chimeraRoutedOptions_t;
/** A chimeraRoutedOptions_t with its header set and every field at its default. */
#define CHIMERA_ROUTED_OPTIONS_INITIALIZER                                                                         \
  {                                                                                                                \
    sizeof(chimeraRoutedOptions_t), CHIMERA_STRUCT_MAGIC, CHIMERA_ROUTED_OPTIONS_VERSION, 0, 0, 0, chimeraFloat32, \
        chimeraFloat32, NULL, NULL, 0, 1, 0, 0, NULL                                                               \
  }
/** Creates a routed exchange on `comm`. Collective over the communicator's mesh when the
 * communicators of its group or token axes do not exist yet, else over its dispatch group
 * (one small agreement on the options). An option that is bad on one rank (K outside [1, E], E
 * not divisible by the group, a malformed layout, an unknown dtype or cost model, a capacity
 * over the scratch limit) is chimeraInvalidArgument on that rank and chimeraMismatch naming it on
 * the others of the group, in that agreement; options that differ between ranks are
 * chimeraMismatch on every rank. chimeraUnsupported on NCCL. */
chimeraResult_t chimeraRoutedExchangeCreate(chimeraComm_t comm, const chimeraRoutedOptions_t* options,
                                            chimeraRoutedExchange_t* out);
/** Frees a routed exchange. NULL is a no-op; a handle that is not live is chimeraInvalidArgument.
 * Dispatch handles it made may be destroyed before or after it. A communicator with live routed
 * exchanges cannot be destroyed (chimeraInvalidArgument). */
chimeraResult_t chimeraRoutedExchangeDestroy(chimeraRoutedExchange_t exchange);
/** Dispatches `tokens` rows of `x` by `topkIdx`/`topkWeights` ([tokens, K]); collective over the group.
 * `*rows` receives the number of rows this rank received. "pp=@k": stage k+1 passes NULL and 0
 * (chimeraRoutedHandleTokens then says how many tokens its combine writes). An expert id out of
 * range on one rank is chimeraInvalidArgument there and chimeraMismatch on its peers; with
 * "tp=R" / "tp=P", on every replica too. */
chimeraResult_t chimeraRoutedDispatch(chimeraRoutedExchange_t exchange, const void* x, const int64_t* topkIdx,
                                      const void* topkWeights, int64_t tokens, chimeraRoutedHandle_t* out,
                                      int64_t* rows);
/** Writes the received rows ([rows, H]), their global expert ids and weights (any may be NULL);
 * `tokensPerExpert` (E/R entries, may be NULL) the rows per local expert. Local. */
chimeraResult_t chimeraRoutedReceive(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch, void* recvX,
                                     int64_t* recvExpert, void* recvWeight, int64_t* tokensPerExpert);
/** y [tokens, H] = sum over k of w * expertOut row; rowWeights [rows] (NULL: 1). Collective. */
chimeraResult_t chimeraRoutedCombine(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                     const void* expertOut, const void* rowWeights, void* y);
/** Backward of combine: gradExpertOut [rows, H], gradRowWeights [rows] (NULL to skip). Collective. */
chimeraResult_t chimeraRoutedCombineBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                             const void* gradY, const void* expertOut, const void* rowWeights,
                                             void* gradExpertOut, void* gradRowWeights);
/** Backward of dispatch: gradX [tokens, H], gradWeights [tokens, K] (NULL to skip). Collective.
 * "pp=@k": stage k+1 passes NULL gradX and gradWeights, stage k NULL gradRecvX and gradRowWeights. */
chimeraResult_t chimeraRoutedDispatchBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                              const void* gradRecvX, const void* gradRowWeights, void* gradX,
                                              void* gradWeights);
/** Bytes the dispatch sent from this rank (payload, headers, counts, padding, reductions). */
chimeraResult_t chimeraRoutedHandleBytes(chimeraRoutedHandle_t dispatch, uint64_t* bytes);
/** The tokens of the dispatch's combine output y and of grad x: this rank's own, or with
 * "pp=@k" on stage k+1 those of its peer on stage k. */
chimeraResult_t chimeraRoutedHandleTokens(chimeraRoutedHandle_t dispatch, int64_t* tokens);
/** Frees a dispatch's state. NULL is a no-op; a handle that is not live is chimeraInvalidArgument. */
chimeraResult_t chimeraRoutedHandleDestroy(chimeraRoutedHandle_t dispatch);

#ifdef __cplusplus
}
#endif

#endif /* CHIMERA_CHIMERA_H_ */
