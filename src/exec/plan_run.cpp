// SPDX-License-Identifier: Apache-2.0
// Running a prepared plan: resolve the operands to this call's buffers and issue the calls.
#include <fmt/format.h>

#include "core/check.hpp"
#include "exec/prepared_plan.hpp"

namespace chimera::detail {
namespace {

thread_local std::uint64_t groupedCalls = 0;

}  // namespace

std::uint64_t groupedCallsIssued() { return groupedCalls; }

Status PreparedPlan::checkBuffers(const void* input, std::size_t inputBytes, const void* output,
                                  std::size_t outputBytes) const {
  if (bufferBytes_[0] > 0) {
    CHIMERA_CHECK_ARG(input != nullptr, "null input buffer on rank {}, which holds {} bytes of the input", rank_,
                      bufferBytes_[0]);
    CHIMERA_CHECK_ARG(inputBytes >= bufferBytes_[0], "input buffer of {} bytes on rank {}, its local tensor needs {}",
                      inputBytes, rank_, bufferBytes_[0]);
  }
  if (bufferBytes_[1] > 0) {
    CHIMERA_CHECK_ARG(output != nullptr, "null output buffer on rank {}, which holds {} bytes of the output", rank_,
                      bufferBytes_[1]);
    CHIMERA_CHECK_ARG(outputBytes >= bufferBytes_[1], "output buffer of {} bytes on rank {}, its local tensor needs {}",
                      outputBytes, rank_, bufferBytes_[1]);
  }
  return Status::ok();
}

Status PreparedPlan::run(const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes,
                         Stream stream) {
  CHIMERA_RETURN_IF_ERROR(checkBuffers(input, inputBytes, output, outputBytes));
  // The plan never writes slot 0 (checked by prepare).
  slots_[0] = static_cast<std::byte*>(const_cast<void*>(input));
  slots_[1] = static_cast<std::byte*>(output);
  for (PreparedStep& step : steps_) {
    CHIMERA_RETURN_IF_ERROR(runLocal(step.before, stream));
    CHIMERA_RETURN_IF_ERROR(runComm(step, stream));
    CHIMERA_RETURN_IF_ERROR(runLocal(step.after, stream));
  }
  return Status::ok();
}

Status PreparedPlan::runLocal(const std::vector<LocalAction>& actions, Stream stream) {
  const auto boxBytes = [&](const LocalAction& a) {
    std::uint64_t elements = 0;
    for (const Box& box : a.boxes) elements += static_cast<std::uint64_t>(box.volume());
    return elements * elementSize_;
  };
  for (const LocalAction& a : actions) {
    switch (a.kind) {
      case LocalAction::Kind::Copy:
        if (resolve(a.dst) == resolve(a.src)) break;  // the bytes are in place already
        CHIMERA_RETURN_IF_ERROR(backend_->copy(resolve(a.dst), resolve(a.src), a.bytes, stream));
        ++copies_.calls;
        copies_.bytes += a.bytes;
        break;
      case LocalAction::Kind::Pack:
        pointers_.clear();
        for (const SlotRef& ref : a.packed) pointers_.push_back(resolve(ref));
        CHIMERA_RETURN_IF_ERROR(backend_->packBoxes(resolve(a.src), a.shape, a.boxes, pointers_, dtype_, stream));
        ++copies_.calls;
        copies_.bytes += boxBytes(a);
        break;
      case LocalAction::Kind::Unpack:
        pointers_.clear();
        for (const SlotRef& ref : a.packed) pointers_.push_back(resolve(ref));
        CHIMERA_RETURN_IF_ERROR(backend_->unpackBoxes(pointers_, resolve(a.dst), a.shape, a.boxes, dtype_, stream));
        ++copies_.calls;
        copies_.bytes += boxBytes(a);
        break;
      case LocalAction::Kind::Scale:
        CHIMERA_RETURN_IF_ERROR(backend_->scale(resolve(a.src), resolve(a.dst), a.count, dtype_, a.factor, stream));
        break;
    }
  }
  return Status::ok();
}

Status PreparedPlan::runComm(PreparedStep& step, Stream stream) {
  switch (step.comm) {
    case PreparedStep::Comm::None: return Status::ok();
    case PreparedStep::Comm::AllReduce:
      return backend_->allReduce(resolve(step.send), resolve(step.recv), step.count, dtype_, step.op, step.axes,
                                 stream);
    case PreparedStep::Comm::ReduceScatter:
      return backend_->reduceScatter(resolve(step.send), resolve(step.recv), step.count, dtype_, step.op, step.axes,
                                     stream);
    case PreparedStep::Comm::AllGather:
      return backend_->allGather(resolve(step.send), resolve(step.recv), step.count, dtype_, step.axes, stream);
    case PreparedStep::Comm::AllToAll:
      return backend_->allToAll(resolve(step.send), resolve(step.recv), step.count, dtype_, step.axes, stream);
    case PreparedStep::Comm::Broadcast:
      return backend_->broadcast(resolve(step.send), resolve(step.recv), step.count, dtype_, step.root, step.axes,
                                 stream);
    case PreparedStep::Comm::Grouped:
      ++groupedCalls;
      ops_.resize(step.p2p.size());
      for (std::size_t i = 0; i < step.p2p.size(); ++i) {
        const P2PRef& ref = step.p2p[i];
        ops_[i] = {ref.kind, resolve(ref.buffer), ref.count, dtype_, ref.peer};
        if (!ref.shape.empty()) {
          ops_[i].box = &ref.box;
          ops_[i].shape = ref.shape;
        }
      }
      return backend_->groupedP2P(ops_, stream);
  }
  return Status::internal("unknown communication kind");
}

}  // namespace chimera::detail
