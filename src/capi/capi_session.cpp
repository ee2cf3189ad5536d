// SPDX-License-Identifier: Apache-2.0
// C API: sessions (begin, describe tensors, record chain-op text, consume, flush).
#include <cstddef>
#include <iterator>

#include "capi/capi_handles.hpp"
#include "capi/capi_registry.hpp"
#include "capi/versioned_struct.hpp"
#include "chimera/chain.hpp"
#include "core/check.hpp"

namespace {

using chimera::Status;

using chimera::detail::guardedCall;

using chimera::detail::CommObject;
using chimera::detail::lookup;
using chimera::detail::SessionObject;

chimera::TensorHandle toHandle(chimeraTensor_t t) { return {t.index, t.window}; }
chimeraTensor_t fromHandle(chimera::TensorHandle t) { return {t.index, t.window}; }

Status parseLayout(const SessionObject* session, const char* text, chimera::Layout& out) {
  CHIMERA_CHECK_ARG(text != nullptr, "null layout text");
  return chimera::Layout::parse(text, session->comm->mesh, out);
}

Status record(chimeraSession_t sessionHandle, const char* opText, chimeraTensor_t input, void* output,
              size_t outputBytes, chimeraTensor_t* out) {
  SessionObject* s = nullptr;
  CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, s));
  CHIMERA_CHECK_ARG(opText != nullptr && out != nullptr, "null op text or chimeraTensor_t* to fill");
  chimera::Chain chain;
  CHIMERA_RETURN_IF_ERROR(chimera::Chain::parse(opText, s->comm->mesh, chain));
  CHIMERA_CHECK_ARG(chain.ops.size() == 1, "record one call at a time, got '{}' ({} ops)", opText, chain.ops.size());
  chimera::TensorHandle result;
  const Status status = s->session->record(toHandle(input), chain.ops[0], output, outputBytes, result);
  if (status.isOk()) *out = fromHandle(result);
  return status;
}

// chimeraSessionStats_t's counters, in the order of chimera::kSessionStatsFields.
constexpr uint64_t chimeraSessionStats_t::*kCStatsMembers[] = {
    &chimeraSessionStats_t::recordedCalls,   &chimeraSessionStats_t::windows,
    &chimeraSessionStats_t::windowCacheHits, &chimeraSessionStats_t::chainsRun,
    &chimeraSessionStats_t::fusedChains,     &chimeraSessionStats_t::bytesAsRecorded,
    &chimeraSessionStats_t::bytesSent,       &chimeraSessionStats_t::rankBytesAsRecorded,
    &chimeraSessionStats_t::rankBytesSent,   &chimeraSessionStats_t::agreements,
    &chimeraSessionStats_t::localCopies,     &chimeraSessionStats_t::localCopyBytes,
};
// Per layout version: its bytes, and how many of the counters above it carries.
constexpr std::size_t kStatsLayoutBytes[] = {offsetof(chimeraSessionStats_t, localCopies),
                                             sizeof(chimeraSessionStats_t)};
constexpr std::size_t kStatsLayoutCounters[] = {10, 12};
static_assert(std::size(kStatsLayoutBytes) == CHIMERA_SESSION_STATS_VERSION, "one layout per version");
static_assert(std::size(kCStatsMembers) == chimera::kSessionStatsFields.size(),
              "chimeraSessionStats_t carries every SessionStats counter");

}  // namespace

extern "C" {

chimeraResult_t chimeraSessionBegin(chimeraComm_t commHandle, int fusion, chimeraSession_t* session) {
  auto run = [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(session != nullptr, "null chimeraSession_t* to fill");
    CHIMERA_CHECK_ARG(fusion >= -1 && fusion <= 1, "fusion {} (expected 1 on, 0 off, -1 from the environment)", fusion);
    chimera::SessionOptions options;
    CHIMERA_RETURN_IF_ERROR(chimera::SessionOptions::fromEnvironment(options));
    if (fusion >= 0) options.fusion = fusion == 1;
    options.stream = comm->stream;
    auto made = std::make_unique<SessionObject>();
    made->comm = comm;
    CHIMERA_RETURN_IF_ERROR(chimera::Session::create(*comm->backend, options, made->session));
    *session = chimera::detail::publish<chimeraSession_t>(std::move(made), chimera::detail::handleValue(commHandle));
    return Status::ok();
  };
  return guardedCall("chimeraSessionBegin", run);
}

chimeraResult_t chimeraSessionTensor(chimeraSession_t sessionHandle, void* buffer, size_t bytes, const char* shape,
                                     chimeraDataType_t datatype, const char* layout, chimeraTensor_t* out) {
  auto run = [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    CHIMERA_CHECK_ARG(shape != nullptr && out != nullptr, "null shape text or chimeraTensor_t* to fill");
    chimera::TensorSpec spec;
    CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(datatype, spec.dtype));
    CHIMERA_RETURN_IF_ERROR(chimera::TensorSpec::parseShape(shape, spec.shape));
    chimera::Layout placed;
    CHIMERA_RETURN_IF_ERROR(parseLayout(session, layout, placed));
    chimera::TensorHandle handle;
    CHIMERA_RETURN_IF_ERROR(session->session->tensor(buffer, bytes, spec, placed, handle));
    *out = fromHandle(handle);
    return Status::ok();
  };
  return guardedCall("chimeraSessionTensor", run);
}

chimeraResult_t chimeraSessionRecord(chimeraSession_t session, const char* op, chimeraTensor_t input, void* output,
                                     size_t outputBytes, chimeraTensor_t* out) {
  return guardedCall("chimeraSessionRecord", [&] { return record(session, op, input, output, outputBytes, out); });
}

chimeraResult_t chimeraSessionDeclareRead(chimeraSession_t sessionHandle, chimeraTensor_t t, const char* layout) {
  auto run = [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    chimera::Layout read;
    CHIMERA_RETURN_IF_ERROR(parseLayout(session, layout, read));
    return session->session->declareRead(toHandle(t), read);
  };
  return guardedCall("chimeraSessionDeclareRead", run);
}

chimeraResult_t chimeraSessionConsume(chimeraSession_t sessionHandle, chimeraTensor_t t, const char* layout) {
  auto run = [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    chimera::Layout read;
    CHIMERA_RETURN_IF_ERROR(parseLayout(session, layout, read));
    return session->session->consume(toHandle(t), read);
  };
  return guardedCall("chimeraSessionConsume", run);
}

chimeraResult_t chimeraSessionDeclareReadRange(chimeraSession_t sessionHandle, chimeraTensor_t t, size_t offset,
                                               size_t bytes) {
  return guardedCall("chimeraSessionDeclareReadRange", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    return session->session->declareRead(toHandle(t), offset, bytes);
  });
}

chimeraResult_t chimeraSessionConsumeRange(chimeraSession_t sessionHandle, chimeraTensor_t t, size_t offset,
                                           size_t bytes) {
  return guardedCall("chimeraSessionConsumeRange", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    return session->session->consume(toHandle(t), offset, bytes);
  });
}

chimeraResult_t chimeraSessionFlush(chimeraSession_t sessionHandle) {
  return guardedCall("chimeraSessionFlush", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    return session->session->flush();
  });
}

chimeraResult_t chimeraSessionGetStats(chimeraSession_t sessionHandle, chimeraSessionStats_t* stats) {
  return guardedCall("chimeraSessionGetStats", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    CHIMERA_CHECK_ARG(stats != nullptr, "null chimeraSessionStats_t*");
    CHIMERA_RETURN_IF_ERROR(
        chimera::detail::checkVersionedStruct(*stats, CHIMERA_SESSION_STATS_VERSION, "chimeraSessionStats_t",
                                              "CHIMERA_SESSION_STATS_INITIALIZER", kStatsLayoutBytes));
    const chimera::SessionStats s = session->session->stats();
    // Only the counters of the caller's version: a caller built against an older header has
    // no room for the later ones.
    for (std::size_t i = 0; i < kStatsLayoutCounters[stats->version - 1]; ++i)
      stats->*kCStatsMembers[i] = s.*chimera::kSessionStatsFields[i].member;
    return Status::ok();
  });
}

chimeraResult_t chimeraSessionEnd(chimeraSession_t session) {
  return guardedCall("chimeraSessionEnd", [&]() -> Status { return chimera::detail::destroy<SessionObject>(session); });
}

}  // extern "C"
