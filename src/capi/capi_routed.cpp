// SPDX-License-Identifier: Apache-2.0
// C API: the routed exchange of MoE layers (create, dispatch, receive, combine, backwards).
// Exchanges and dispatch handles live in the handle registry like every other handle
// (capi_registry.hpp); an exchange is owned by its communicator.
#include <cstddef>
#include <iterator>
#include <memory>

#include "capi/capi_handles.hpp"
#include "capi/capi_registry.hpp"
#include "capi/versioned_struct.hpp"
#include "chimera/routed_exchange.hpp"
#include "core/check.hpp"

namespace {

using chimera::Status;
using chimera::detail::CommObject;
using chimera::detail::guardedCall;
using chimera::detail::HandleKind;
using chimera::detail::lookup;

// The object of a chimeraRoutedExchange_t.
struct ExchangeObject {
  static constexpr HandleKind kKind = HandleKind::RoutedExchange;
  std::unique_ptr<chimera::RoutedExchange> exchange;
};

// The object of a chimeraRoutedHandle_t.
struct DispatchObject {
  static constexpr HandleKind kKind = HandleKind::RoutedHandle;
  chimera::RoutedDispatch handle;
};

// The bytes of chimeraRoutedOptions_t per layout version.
constexpr std::size_t kOptionsLayoutBytes[] = {sizeof(chimeraRoutedOptions_t)};
static_assert(std::size(kOptionsLayoutBytes) == CHIMERA_ROUTED_OPTIONS_VERSION, "one layout per version");

// The C options as the C++ ones; InvalidArgument naming a field out of range, or the struct's
// header when it was not declared with its initializer. The fields are read either way (the
// layout of every version starts with version 1's), so that a rank whose struct is refused
// still joins its peers' creation with their group and token axes, and they fail with it.
Status readOptions(const CommObject& comm, const chimeraRoutedOptions_t& options, chimera::RoutedExchangeOptions& o) {
  const Status header =
      chimera::detail::checkVersionedStruct(options, CHIMERA_ROUTED_OPTIONS_VERSION, "chimeraRoutedOptions_t",
                                            "CHIMERA_ROUTED_OPTIONS_INITIALIZER", kOptionsLayoutBytes);
  o.numExperts = options.numExperts;
  o.topK = options.topK;
  o.hidden = options.hidden;
  if (options.group != nullptr) {
    // A group naming none leaves the rank unable to tell which group its peers create the
    // exchange over: announced to every rank instead (Backend::announceFault).
    const Status group = comm.mesh.parseAxes(options.group, o.group);
    if (!group.isOk()) return comm.backend->announceFault(group);
  }
  if (options.tokenLayout != nullptr) o.tokenLayout = options.tokenLayout;
  CHIMERA_RETURN_IF_ERROR(header);
  CHIMERA_CHECK_ARG(options.program >= 0 && options.program <= 2, "program {} (0 planned, 1 fused, 2 per expert)",
                    options.program);
  CHIMERA_CHECK_ARG(options.dropOverflow == 0 || options.dropOverflow == 1, "dropOverflow {} (expected 1 or 0)",
                    options.dropOverflow);
  CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(options.datatype, o.dtype));
  CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(options.weightType, o.weightDtype));
  o.capacity = options.capacity;
  o.overflow = options.dropOverflow == 1 ? chimera::CapacityOverflow::Drop : chimera::CapacityOverflow::Error;
  o.program = static_cast<chimera::RoutedProgram>(options.program);
  o.scratchLimitBytes = options.scratchLimitBytes;
  if (options.topology != nullptr) o.topology = options.topology;
  return Status::ok();
}

// The exchange of a live handle and, when `dispatch` is not null, the state of a live dispatch.
Status lookupCall(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch, ExchangeObject*& e,
                  DispatchObject*& d) {
  CHIMERA_RETURN_IF_ERROR(lookup(exchange, e));
  return lookup(dispatch, d);
}

}  // namespace

extern "C" {

chimeraResult_t chimeraRoutedExchangeCreate(chimeraComm_t comm, const chimeraRoutedOptions_t* options,
                                            chimeraRoutedExchange_t* out) {
  return guardedCall("chimeraRoutedExchangeCreate", [&]() -> Status {
    CommObject* c = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(comm, c));
    CHIMERA_CHECK_ARG(out != nullptr, "null chimeraRoutedExchange_t* to fill");
    // A bad option on this rank is its failure in the exchange's agreement, not a return before
    // it: the peers then fail at once instead of waiting for this rank.
    chimera::RoutedExchangeOptions o;
    const Status read =
        options != nullptr ? readOptions(*c, *options, o) : Status::invalidArgument("null chimeraRoutedOptions_t");
    auto made = std::make_unique<ExchangeObject>();
    CHIMERA_RETURN_IF_ERROR(chimera::RoutedExchange::create(*c->backend, o, made->exchange, read));
    *out = chimera::detail::publish<chimeraRoutedExchange_t>(std::move(made), chimera::detail::handleValue(comm));
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedExchangeDestroy(chimeraRoutedExchange_t exchange) {
  return guardedCall("chimeraRoutedExchangeDestroy",
                     [&]() -> Status { return chimera::detail::destroy<ExchangeObject>(exchange); });
}

chimeraResult_t chimeraRoutedDispatch(chimeraRoutedExchange_t exchange, const void* x, const int64_t* topkIdx,
                                      const void* topkWeights, int64_t tokens, chimeraRoutedHandle_t* out,
                                      int64_t* rows) {
  return guardedCall("chimeraRoutedDispatch", [&]() -> Status {
    ExchangeObject* e = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(exchange, e));
    CHIMERA_CHECK_ARG(out != nullptr, "null chimeraRoutedHandle_t* to fill");
    auto made = std::make_unique<DispatchObject>();
    CHIMERA_RETURN_IF_ERROR(e->exchange->dispatch(x, topkIdx, topkWeights, tokens, made->handle));
    if (rows != nullptr) *rows = made->handle.rows();
    *out = chimera::detail::publish<chimeraRoutedHandle_t>(std::move(made));
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedReceive(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch, void* recvX,
                                     int64_t* recvExpert, void* recvWeight, int64_t* tokensPerExpert) {
  return guardedCall("chimeraRoutedReceive", [&]() -> Status {
    ExchangeObject* e = nullptr;
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookupCall(exchange, dispatch, e, d));
    CHIMERA_RETURN_IF_ERROR(e->exchange->receive(d->handle, recvX, recvExpert, recvWeight));
    if (tokensPerExpert != nullptr) {
      const auto& counts = d->handle.tokensPerExpert();
      for (std::size_t i = 0; i < counts.size(); ++i) tokensPerExpert[i] = counts[i];
    }
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedCombine(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                     const void* expertOut, const void* rowWeights, void* y) {
  return guardedCall("chimeraRoutedCombine", [&]() -> Status {
    ExchangeObject* e = nullptr;
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookupCall(exchange, dispatch, e, d));
    return e->exchange->combine(expertOut, rowWeights, d->handle, y);
  });
}

chimeraResult_t chimeraRoutedCombineBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                             const void* gradY, const void* expertOut, const void* rowWeights,
                                             void* gradExpertOut, void* gradRowWeights) {
  return guardedCall("chimeraRoutedCombineBackward", [&]() -> Status {
    ExchangeObject* e = nullptr;
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookupCall(exchange, dispatch, e, d));
    return e->exchange->combineBackward(gradY, expertOut, rowWeights, d->handle, gradExpertOut, gradRowWeights);
  });
}

chimeraResult_t chimeraRoutedDispatchBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                              const void* gradRecvX, const void* gradRowWeights, void* gradX,
                                              void* gradWeights) {
  return guardedCall("chimeraRoutedDispatchBackward", [&]() -> Status {
    ExchangeObject* e = nullptr;
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookupCall(exchange, dispatch, e, d));
    return e->exchange->dispatchBackward(gradRecvX, gradRowWeights, d->handle, gradX, gradWeights);
  });
}

chimeraResult_t chimeraRoutedHandleBytes(chimeraRoutedHandle_t dispatch, uint64_t* bytes) {
  return guardedCall("chimeraRoutedHandleBytes", [&]() -> Status {
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(dispatch, d));
    CHIMERA_CHECK_ARG(bytes != nullptr, "null bytes to fill");
    *bytes = d->handle.stats().bytesSent();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedHandleTokens(chimeraRoutedHandle_t dispatch, int64_t* tokens) {
  return guardedCall("chimeraRoutedHandleTokens", [&]() -> Status {
    DispatchObject* d = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(dispatch, d));
    CHIMERA_CHECK_ARG(tokens != nullptr, "null tokens to fill");
    *tokens = d->handle.tokens();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedHandleDestroy(chimeraRoutedHandle_t dispatch) {
  return guardedCall("chimeraRoutedHandleDestroy",
                     [&]() -> Status { return chimera::detail::destroy<DispatchObject>(dispatch); });
}

}  // extern "C"
