// SPDX-License-Identifier: Apache-2.0
// C API: the routed exchange of MoE layers (create, dispatch, receive, combine, backwards).
#include <memory>

#include "capi/capi_handles.hpp"
#include "capi/capi_registry.hpp"
#include "chimera/routed_exchange.hpp"
#include "core/check.hpp"

struct chimeraRoutedExchange {
  chimeraComm* comm = nullptr;
  std::unique_ptr<chimera::RoutedExchange> exchange;
};

struct chimeraRoutedHandle {
  chimera::RoutedDispatch handle;
};

namespace {

using chimera::Status;
using chimera::detail::guardedCall;

Status checkExchange(const chimeraRoutedExchange* exchange, const chimeraRoutedHandle* dispatch, bool needDispatch) {
  CHIMERA_CHECK_ARG(exchange != nullptr && exchange->exchange != nullptr, "null chimeraRoutedExchange_t");
  CHIMERA_CHECK_ARG(!needDispatch || dispatch != nullptr, "null chimeraRoutedHandle_t");
  return chimera::detail::lookupComm(exchange->comm);
}

}  // namespace

extern "C" {

chimeraResult_t chimeraRoutedExchangeCreate(chimeraComm_t comm, const chimeraRoutedOptions_t* options,
                                            chimeraRoutedExchange_t* out) {
  return guardedCall("chimeraRoutedExchangeCreate", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(chimera::detail::lookupComm(comm));
    CHIMERA_CHECK_ARG(options != nullptr && out != nullptr, "null options or chimeraRoutedExchange_t* to fill");
    CHIMERA_CHECK_ARG(options->program >= 0 && options->program <= 2, "program {} (0 planned, 1 fused, 2 per expert)",
                      options->program);
    chimera::RoutedExchangeOptions o;
    o.numExperts = options->numExperts;
    o.topK = options->topK;
    o.hidden = options->hidden;
    CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(options->datatype, o.dtype));
    CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(options->weightType, o.weightDtype));
    if (options->group != nullptr) CHIMERA_RETURN_IF_ERROR(comm->mesh.parseAxes(options->group, o.group));
    if (options->tokenLayout != nullptr) o.tokenLayout = options->tokenLayout;
    o.capacity = options->capacity;
    o.overflow = options->dropOverflow != 0 ? chimera::CapacityOverflow::Drop : chimera::CapacityOverflow::Error;
    o.program = static_cast<chimera::RoutedProgram>(options->program);
    o.scratchLimitBytes = options->scratchLimitBytes;
    auto made = std::make_unique<chimeraRoutedExchange>();
    made->comm = comm;
    CHIMERA_RETURN_IF_ERROR(chimera::RoutedExchange::create(*comm->backend, o, made->exchange));
    *out = made.release();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedExchangeDestroy(chimeraRoutedExchange_t exchange) {
  delete exchange;
  return chimeraSuccess;
}

chimeraResult_t chimeraRoutedDispatch(chimeraRoutedExchange_t exchange, const void* x, const int64_t* topkIdx,
                                      const void* topkWeights, int64_t tokens, chimeraRoutedHandle_t* out,
                                      int64_t* rows) {
  return guardedCall("chimeraRoutedDispatch", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(checkExchange(exchange, nullptr, false));
    CHIMERA_CHECK_ARG(out != nullptr, "null chimeraRoutedHandle_t* to fill");
    auto made = std::make_unique<chimeraRoutedHandle>();
    CHIMERA_RETURN_IF_ERROR(exchange->exchange->dispatch(x, topkIdx, topkWeights, tokens, made->handle));
    if (rows != nullptr) *rows = made->handle.rows();
    *out = made.release();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedReceive(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch, void* recvX,
                                     int64_t* recvExpert, void* recvWeight, int64_t* tokensPerExpert) {
  return guardedCall("chimeraRoutedReceive", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(checkExchange(exchange, dispatch, true));
    if (tokensPerExpert != nullptr) {
      const auto& counts = dispatch->handle.tokensPerExpert();
      for (std::size_t e = 0; e < counts.size(); ++e) tokensPerExpert[e] = counts[e];
    }
    return exchange->exchange->receive(dispatch->handle, recvX, recvExpert, recvWeight);
  });
}

chimeraResult_t chimeraRoutedCombine(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                     const void* expertOut, const void* rowWeights, void* y) {
  return guardedCall("chimeraRoutedCombine", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(checkExchange(exchange, dispatch, true));
    return exchange->exchange->combine(expertOut, rowWeights, dispatch->handle, y);
  });
}

chimeraResult_t chimeraRoutedCombineBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                             const void* gradY, const void* expertOut, const void* rowWeights,
                                             void* gradExpertOut, void* gradRowWeights) {
  return guardedCall("chimeraRoutedCombineBackward", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(checkExchange(exchange, dispatch, true));
    return exchange->exchange->combineBackward(gradY, expertOut, rowWeights, dispatch->handle, gradExpertOut,
                                               gradRowWeights);
  });
}

chimeraResult_t chimeraRoutedDispatchBackward(chimeraRoutedExchange_t exchange, chimeraRoutedHandle_t dispatch,
                                              const void* gradRecvX, const void* gradRowWeights, void* gradX,
                                              void* gradWeights) {
  return guardedCall("chimeraRoutedDispatchBackward", [&]() -> Status {
    CHIMERA_RETURN_IF_ERROR(checkExchange(exchange, dispatch, true));
    return exchange->exchange->dispatchBackward(gradRecvX, gradRowWeights, dispatch->handle, gradX, gradWeights);
  });
}

chimeraResult_t chimeraRoutedHandleBytes(chimeraRoutedHandle_t dispatch, uint64_t* bytes) {
  return guardedCall("chimeraRoutedHandleBytes", [&]() -> Status {
    CHIMERA_CHECK_ARG(dispatch != nullptr && bytes != nullptr, "null dispatch or bytes to fill");
    *bytes = dispatch->handle.stats().bytesSent();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedHandleTokens(chimeraRoutedHandle_t dispatch, int64_t* tokens) {
  return guardedCall("chimeraRoutedHandleTokens", [&]() -> Status {
    CHIMERA_CHECK_ARG(dispatch != nullptr && tokens != nullptr, "null dispatch or tokens to fill");
    *tokens = dispatch->handle.tokens();
    return Status::ok();
  });
}

chimeraResult_t chimeraRoutedHandleDestroy(chimeraRoutedHandle_t dispatch) {
  delete dispatch;
  return chimeraSuccess;
}

}  // extern "C"
