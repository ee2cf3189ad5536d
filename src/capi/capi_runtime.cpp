// SPDX-License-Identifier: Apache-2.0
// C API: version, explicit groups, streams, synchronisation, configured sessions and the
// receiving side of per-rank hand-offs. Handles are looked up in the registry and every entry
// point runs under its exception guard (capi_registry.hpp), as the others do.
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "capi/capi_handles.hpp"
#include "capi/capi_registry.hpp"
#include "capi/versioned_struct.hpp"
#include "core/check.hpp"

namespace {

using chimera::Status;
using chimera::detail::guardedCall;

using chimera::detail::CommObject;
using chimera::detail::lookup;
using chimera::detail::SessionObject;

// The bytes of chimeraSessionConfig_t per layout version (version 2 added `topology`).
constexpr std::size_t kConfigLayoutBytes[] = {offsetof(chimeraSessionConfig_t, topology),
                                              sizeof(chimeraSessionConfig_t)};
static_assert(std::size(kConfigLayoutBytes) == CHIMERA_SESSION_CONFIG_VERSION, "one layout per version");

}  // namespace

extern "C" {

chimeraResult_t chimeraGetVersion(int* version) {
  return guardedCall("chimeraGetVersion", [&]() -> Status {
    CHIMERA_CHECK_ARG(version != nullptr, "null int* for the version");
    *version = CHIMERA_VERSION_CODE;
    return Status::ok();
  });
}

chimeraResult_t chimeraCommCreateGroups(chimeraComm_t commHandle, const char* groups) {
  return guardedCall("chimeraCommCreateGroups", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(groups != nullptr, "null group list");
    std::vector<chimera::AxisSet> sets;
    std::string_view rest(groups);
    while (!rest.empty()) {
      const std::size_t end = rest.find(';');
      const std::string_view item = rest.substr(0, end);
      chimera::AxisSet axes;
      const Status parsed = comm->mesh.parseAxes(item, axes);
      if (!parsed.isOk()) return comm->backend->announceFault(parsed);
      sets.push_back(axes);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
    return comm->backend->createGroups(sets);
  });
}

chimeraResult_t chimeraCommSetStream(chimeraComm_t commHandle, void* stream) {
  return guardedCall("chimeraCommSetStream", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    comm->stream = stream;
    return Status::ok();
  });
}

chimeraResult_t chimeraCommSynchronize(chimeraComm_t commHandle) {
  return guardedCall("chimeraCommSynchronize", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    return comm->backend->synchronize(comm->stream);
  });
}

chimeraResult_t chimeraSessionBeginConfig(chimeraComm_t commHandle, const chimeraSessionConfig_t* config,
                                          chimeraSession_t* session) {
  return guardedCall("chimeraSessionBeginConfig", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(session != nullptr, "null chimeraSession_t* to fill");
    chimera::SessionOptions options;
    CHIMERA_RETURN_IF_ERROR(chimera::SessionOptions::fromEnvironment(options));
    if (config != nullptr) {
      CHIMERA_RETURN_IF_ERROR(
          chimera::detail::checkVersionedStruct(*config, CHIMERA_SESSION_CONFIG_VERSION, "chimeraSessionConfig_t",
                                                "CHIMERA_SESSION_CONFIG_INITIALIZER", kConfigLayoutBytes));
      CHIMERA_CHECK_ARG(config->fusion >= -1 && config->fusion <= 1, "fusion {} (expected 1, 0 or -1)", config->fusion);
      CHIMERA_CHECK_ARG(config->perRank == 0 || config->perRank == 1, "perRank {} (expected 0 or 1)", config->perRank);
      CHIMERA_CHECK_ARG(config->checkEveryWindow >= -1 && config->checkEveryWindow <= 1,
                        "checkEveryWindow {} (expected 1, 0 or -1)", config->checkEveryWindow);
      if (config->fusion >= 0) options.fusion = config->fusion == 1;
      if (config->checkEveryWindow >= 0) options.checkEveryWindow = config->checkEveryWindow == 1;
      options.perRank = config->perRank == 1;
      options.stream = config->stream;
      if (config->version >= 2 && config->topology != nullptr) options.topology = config->topology;
    }
    if (options.stream == nullptr) options.stream = comm->stream;
    auto made = std::make_unique<SessionObject>();
    made->comm = comm;
    CHIMERA_RETURN_IF_ERROR(chimera::Session::create(*comm->backend, options, made->session));
    *session = chimera::detail::publish<chimeraSession_t>(std::move(made), chimera::detail::handleValue(commHandle));
    return Status::ok();
  });
}

chimeraResult_t chimeraSessionRecv(chimeraSession_t sessionHandle, const char* shape, chimeraDataType_t datatype,
                                   const char* layout, const char* axis, chimeraDirection_t direction, void* buffer,
                                   size_t bytes, chimeraTensor_t* out) {
  return guardedCall("chimeraSessionRecv", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    CHIMERA_CHECK_ARG(shape != nullptr && layout != nullptr && axis != nullptr && out != nullptr,
                      "null shape, layout or axis text, or chimeraTensor_t* to fill");
    const long long way = chimera::detail::cEnumValue(direction);
    CHIMERA_CHECK_ARG(way == chimeraForward || way == chimeraBackward,
                      "direction {} (expected chimeraForward or chimeraBackward)", way);
    const chimera::Mesh& mesh = session->comm->mesh;
    chimera::TensorSpec spec;
    CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(datatype, spec.dtype));
    CHIMERA_RETURN_IF_ERROR(chimera::TensorSpec::parseShape(shape, spec.shape));
    chimera::Layout placed;
    CHIMERA_RETURN_IF_ERROR(chimera::Layout::parse(layout, mesh, placed));
    chimera::AxisSet axes;
    CHIMERA_RETURN_IF_ERROR(mesh.parseAxes(axis, axes));
    chimera::TensorHandle handle;
    CHIMERA_RETURN_IF_ERROR(way == chimeraBackward
                                ? session->session->recvBackward(spec, placed, axes, buffer, bytes, handle)
                                : session->session->recv(spec, placed, axes, buffer, bytes, handle));
    *out = {handle.index, handle.window};
    return Status::ok();
  });
}

chimeraResult_t chimeraSessionSetStream(chimeraSession_t sessionHandle, void* stream) {
  return guardedCall("chimeraSessionSetStream", [&]() -> Status {
    SessionObject* session = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(sessionHandle, session));
    session->session->setStream(stream);
    return Status::ok();
  });
}

}  // extern "C"
