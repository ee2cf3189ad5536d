// SPDX-License-Identifier: Apache-2.0
// Recording: every call is checked against the chain semantics and appended to the window.
#include "chimera/session.hpp"

#include <fmt/format.h>

#include <bit>
#include <optional>
#include <string>
#include <string_view>

#include "chimera/planning/topology_cost.hpp"
#include "common/env.hpp"
#include "core/check.hpp"
#include "session/session_impl.hpp"

namespace chimera {
namespace {

// A holder needs a buffer of its local tensor; a rank holding nothing passes none.
Status checkBuffer(const Layout& layout, const TensorSpec& spec, int rank, const void* buffer, std::size_t bytes,
                   std::string_view what) {
  if (!layout.holds(rank)) return Status::ok();
  const auto need = static_cast<std::size_t>(layout.localBytes(spec));
  CHIMERA_CHECK_ARG(need == 0 || buffer != nullptr, "{}: rank {} holds {} bytes of {} as {} but passed no buffer", what,
                    rank, need, spec.toString(), layout.toString());
  CHIMERA_CHECK_ARG(bytes >= need,
                    "{}: buffer of {} bytes on rank {} is smaller than the local tensor ({} bytes of {} as {})", what,
                    bytes, rank, need, spec.toString(), layout.toString());
  return Status::ok();
}

}  // namespace

Status SessionOptions::fromEnvironment(SessionOptions& out) {
  SessionOptions options;
  CHIMERA_RETURN_IF_ERROR(detail::readEnvSwitch("CHIMERA_FUSION", options.fusion, options.fusion));
  CHIMERA_RETURN_IF_ERROR(
      detail::readEnvSwitch("CHIMERA_CHECK_EVERY_WINDOW", options.checkEveryWindow, options.checkEveryWindow));
  CHIMERA_RETURN_IF_ERROR(
      detail::readEnvCount("CHIMERA_PREPARED_PLAN_LIMIT", options.preparedPlanLimit, options.preparedPlanLimit));
  if (std::optional<std::string> topology = detail::readEnvText("CHIMERA_TOPOLOGY")) options.topology = *topology;
  out = options;
  return Status::ok();
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Session::~Session() = default;

Status Session::create(Backend& backend, const SessionOptions& options, std::unique_ptr<Session>& out) {
  std::unique_ptr<PlanCost> owned;
  if (options.cost == nullptr) {
    const std::string name = options.topology.empty() ? backend.defaultTopology() : options.topology;
    if (const Status loaded = loadPlanCost(name, owned, backend.movesBoxesEverywhere()); !loaded.isOk()) {
      return Status::invalidArgument(
          fmt::format("session cost model (SessionOptions::topology, CHIMERA_TOPOLOGY): {}", loaded.message()));
    }
    CHIMERA_RETURN_IF_ERROR(owned->checkMesh(backend.mesh()));
  }
  auto impl = std::make_unique<Impl>(backend, options, std::move(owned));
  CHIMERA_RETURN_IF_ERROR(impl->executor.setPreparedPlanLimit(options.preparedPlanLimit));
  out.reset(new Session(std::move(impl)));
  return Status::ok();
}

Status Session::Impl::checkHandle(TensorHandle t) const {
  CHIMERA_CHECK_ARG(t.window == windowId && t.index < window.values.size(),
                    "tensor handle {} of window {} is not live (the current window is {}; handles expire at a flush)",
                    t.index, t.window, windowId);
  CHIMERA_CHECK_ARG(!window.values[t.index].overwritten,
                    "tensor handle {} was overwritten by a later in-place call; read the handle that call returned",
                    t.index);
  return Status::ok();
}

Status Session::tensor(void* buffer, std::size_t bytes, const TensorSpec& spec, const Layout& layout,
                       TensorHandle& out) {
  Impl& s = *impl_;
  CHIMERA_CHECK_ARG(layout.mesh().axesEqual(s.backend.mesh()), "tensor layout {} is on mesh {}, the session on {}",
                    layout.toString(), layout.mesh().toString(), s.backend.mesh().toString());
  CHIMERA_RETURN_IF_ERROR(layout.validate(spec));
  CHIMERA_CHECK_ARG(!s.options.perRank || layout.holds(s.backend.rank()),
                    "per-rank recording: rank {} does not hold {} placed as {}; record only this rank's tensors",
                    s.backend.rank(), spec.toString(), layout.toString());
  CHIMERA_RETURN_IF_ERROR(checkBuffer(layout, spec, s.backend.rank(), buffer, bytes, "tensor"));
  CHIMERA_CHECK_ARG(s.window.values.size() < kMaxWindowValues,
                    "window holds {} values, the most a window may hold; flush first", s.window.values.size());
  detail::WindowValue value;
  value.spec = spec;
  value.layout = layout;
  value.buffer = buffer;
  value.bytes = bytes;
  value.storage = s.window.storages++;
  s.window.values.push_back(std::move(value));
  out = {static_cast<std::uint32_t>(s.window.values.size() - 1), s.windowId};
  return Status::ok();
}

Status Session::Impl::record(TensorHandle in, const ChainOp& op, void* output, std::size_t outputBytes,
                             TensorHandle& out) {
  CHIMERA_RETURN_IF_ERROR(checkHandle(in));
  const bool inPlace = op.kind == ChainOp::Kind::AllReduce || op.kind == ChainOp::Kind::Broadcast;
  CHIMERA_CHECK_ARG(window.values.size() < kMaxWindowValues,
                    "window holds {} values, the most a window may hold; flush first", window.values.size());
  const detail::WindowValue& input = window.values[in.index];
  const Mesh& mesh = backend.mesh();
  CHIMERA_CHECK_ARG(!op.axes.empty() && (op.axes.bits() & ~mesh.allAxes().bits()) == 0,
                    "{} call names mesh axes (bits {:#x}) the mesh {} does not have", chainOpKindName(op.kind),
                    op.axes.bits(), mesh.toString());
  if (op.kind == ChainOp::Kind::Broadcast) {
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      CHIMERA_CHECK_ARG(!op.axes.contains(axis) || input.layout.placement(axis).isReplicate(),
                        "in-place broadcast needs R on {}, but the tensor is {}", mesh.axis(axis).name,
                        input.layout.toString());
    }
  }
  const bool handOff = options.perRank && op.kind == ChainOp::Kind::Send;
  if (options.perRank) {
    CHIMERA_CHECK_ARG(input.layout.holds(backend.rank()) && !input.handedOff,
                      "per-rank recording: {} on {} names a group rank {} is not in (it does not hold the tensor); "
                      "record only the calls this rank takes part in",
                      op.toString(mesh), input.layout.toString(), backend.rank());
    CHIMERA_CHECK_ARG(!handOff || (output == nullptr && outputBytes == 0),
                      "per-rank recording: {} is the sending side only (no receive buffer); the receiving stage "
                      "records recv",
                      op.toString(mesh));
  }
  OpEffect effect;
  Status applied = applyChainOp(input.layout, op, input.spec, effect);
  if (!applied.isOk()) return Status(applied.code(), fmt::format("{}: {}", op.toString(mesh), applied.message()));
  detail::WindowValue value;
  value.spec = input.spec;
  value.layout = effect.output;
  value.producer = static_cast<int>(window.calls.size());
  if (inPlace) {
    value.buffer = input.buffer;
    value.bytes = input.bytes;
    value.storage = input.storage;
  } else if (handOff) {
    // Not held here: what the receiving group reads is declared there and exchanged at the
    // first flush; until then the chain counts as declared (it ends in the hand-off).
    value.handedOff = true;
    value.declared = value.layout;
    value.storage = window.storages++;
  } else {
    // The call's text is formatted only for a message: this runs on every recorded call.
    if (Status sized = checkBuffer(value.layout, value.spec, backend.rank(), output, outputBytes, "its output");
        !sized.isOk()) {
      return Status(sized.code(), fmt::format("{}: {}", op.toString(mesh), sized.message()));
    }
    CHIMERA_CHECK_ARG(!detail::overlaps(input.buffer, input.bytes, output, outputBytes),
                      "{}: the output buffer overlaps the input buffer (out-of-place call)", op.toString(mesh));
    value.buffer = output;
    value.bytes = outputBytes;
    value.storage = window.storages++;
  }
  if (inPlace) window.values[in.index].overwritten = true;
  window.calls.push_back({op, in.index, static_cast<std::uint32_t>(window.values.size()), inPlace});
  window.values.push_back(std::move(value));
  ++stats.recordedCalls;
  out = {static_cast<std::uint32_t>(window.values.size() - 1), windowId};
  return Status::ok();
}

Status Session::allReduce(TensorHandle in, AxisSet axes, TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::AllReduce, axes, 0, 0, 0}, nullptr, 0, out);
}

Status Session::reduceScatter(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                              TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::ReduceScatter, axes, dim, 0, 0}, output, outputBytes, out);
}

Status Session::allGather(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                          TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::AllGather, axes, dim, 0, 0}, output, outputBytes, out);
}

Status Session::allToAll(TensorHandle in, AxisSet axes, int fromDim, int toDim, void* output, std::size_t outputBytes,
                         TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::AllToAll, axes, fromDim, toDim, 0}, output, outputBytes, out);
}

Status Session::slice(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                      TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::Slice, axes, dim, 0, 0}, output, outputBytes, out);
}

Status Session::broadcast(TensorHandle in, AxisSet axes, int root, TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::Broadcast, axes, 0, 0, root}, nullptr, 0, out);
}

Status Session::send(TensorHandle in, AxisSet axis, void* recvBuffer, std::size_t recvBytes, TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::Send, axis, 0, 0, 0, 1}, recvBuffer, recvBytes, out);
}

Status Session::sendBackward(TensorHandle in, AxisSet axis, void* recvBuffer, std::size_t recvBytes,
                             TensorHandle& out) {
  return impl_->record(in, {ChainOp::Kind::Send, axis, 0, 0, 0, -1}, recvBuffer, recvBytes, out);
}

Status Session::Impl::recordReceive(const TensorSpec& spec, const Layout& layout, AxisSet axis, int stageStep,
                                    void* buffer, std::size_t bytes, TensorHandle& out) {
  const int rank = backend.rank();
  const Mesh& mesh = backend.mesh();
  CHIMERA_CHECK_ARG(options.perRank,
                    "recv records the receiving side of a hand-off, which only per-rank recording "
                    "has (SessionOptions::perRank); SPMD recording makes one send call on both sides");
  CHIMERA_CHECK_ARG(layout.mesh().axesEqual(mesh), "received layout {} is on mesh {}, the session on {}",
                    layout.toString(), layout.mesh().toString(), mesh.toString());
  CHIMERA_RETURN_IF_ERROR(layout.validate(spec));
  CHIMERA_CHECK_ARG(std::popcount(axis.bits()) == 1 && (axis.bits() & ~mesh.allAxes().bits()) == 0,
                    "recv needs exactly one mesh axis, got axis set {:#x}", axis.bits());
  const int a = std::countr_zero(axis.bits());
  CHIMERA_CHECK_ARG(layout.placement(a).isStage(), "recv along {} needs a stage placement there, got {}",
                    mesh.axis(a).name, layout.toString());
  const int from = layout.placement(a).stage - stageStep;
  CHIMERA_CHECK_ARG(
      from >= 0 && from<mesh.axis(a).size, "{} into {}: there is no stage {} along {} to send it", stageStep> 0
          ? "recv"
          : "recvBackward",
      layout.toString(), from, mesh.axis(a).name);
  CHIMERA_CHECK_ARG(layout.holds(rank),
                    "per-rank recording: rank {} does not hold {} placed as {}; record only this "
                    "rank's side of a hand-off",
                    rank, spec.toString(), layout.toString());
  CHIMERA_RETURN_IF_ERROR(checkBuffer(layout, spec, rank, buffer, bytes, "recv"));
  CHIMERA_CHECK_ARG(window.values.size() < kMaxWindowValues,
                    "window holds {} values, the most a window may hold; flush first", window.values.size());
  detail::WindowValue value;
  value.spec = spec;
  value.layout = layout;
  value.buffer = buffer;
  value.bytes = bytes;
  value.storage = window.storages++;
  value.received = true;
  window.receives.push_back({static_cast<std::uint32_t>(window.values.size()), axis, stageStep, window.calls.size()});
  window.values.push_back(std::move(value));
  ++stats.recordedCalls;
  out = {static_cast<std::uint32_t>(window.values.size() - 1), windowId};
  return Status::ok();
}

Status Session::recv(const TensorSpec& spec, const Layout& layout, AxisSet axis, void* buffer, std::size_t bytes,
                     TensorHandle& out) {
  return impl_->recordReceive(spec, layout, axis, 1, buffer, bytes, out);
}

Status Session::recvBackward(const TensorSpec& spec, const Layout& layout, AxisSet axis, void* buffer,
                             std::size_t bytes, TensorHandle& out) {
  return impl_->recordReceive(spec, layout, axis, -1, buffer, bytes, out);
}

Status Session::record(TensorHandle in, const ChainOp& op, void* output, std::size_t outputBytes, TensorHandle& out) {
  return impl_->record(in, op, output, outputBytes, out);
}

Status Session::declareRead(TensorHandle t, const Layout& layout) {
  Impl& s = *impl_;
  CHIMERA_RETURN_IF_ERROR(s.checkHandle(t));
  detail::WindowValue& value = s.window.values[t.index];
  CHIMERA_CHECK_ARG(!value.handedOff, "tensor {} was sent to another stage; its receivers declare what they read",
                    t.index);
  CHIMERA_CHECK_ARG(layout.mesh().axesEqual(s.backend.mesh()), "consumed layout {} is on mesh {}, the session on {}",
                    layout.toString(), layout.mesh().toString(), s.backend.mesh().toString());
  CHIMERA_RETURN_IF_ERROR(layout.validate(value.spec));
  Status readable = checkConsumable(value.layout, layout, value.spec);
  if (!readable.isOk()) {
    return Status::invalidArgument(fmt::format("cannot consume tensor {} ({}) as {}: {}", t.index,
                                               value.layout.toString(), layout.toString(), readable.message()));
  }
  value.declared = layout;
  value.declaredRange.reset();
  return Status::ok();
}

Status Session::declareRead(TensorHandle t, std::size_t offset, std::size_t bytes) {
  Impl& s = *impl_;
  CHIMERA_RETURN_IF_ERROR(s.checkHandle(t));
  detail::WindowValue& value = s.window.values[t.index];
  CHIMERA_CHECK_ARG(!value.handedOff, "tensor {} was sent to another stage; its receivers declare what they read",
                    t.index);
  const detail::ByteRange range{offset, bytes};
  Status valid = detail::checkByteRange(value.layout, value.spec, s.backend.rank(), range);
  if (!valid.isOk()) {
    return Status::invalidArgument(
        fmt::format("cannot consume tensor {} ({}): {}", t.index, value.layout.toString(), valid.message()));
  }
  value.declaredRange = range;
  value.declared.reset();
  return Status::ok();
}

Status Session::consume(TensorHandle t, std::size_t offset, std::size_t bytes) {
  const Status declared = declareRead(t, offset, bytes);
  return declared.isOk() ? impl_->flush() : impl_->abandon(declared);
}

Status Session::consume(TensorHandle t, const Layout& layout) {
  const Status declared = declareRead(t, layout);
  return declared.isOk() ? impl_->flush() : impl_->abandon(declared);
}

Status Session::flush() { return impl_->flush(); }

Status Session::wait(TensorHandle t) {
  if (t.window != impl_->windowId) {
    CHIMERA_CHECK_ARG(t.window < impl_->windowId, "tensor handle of window {} is from no window yet (current {})",
                      t.window, impl_->windowId);
    return Status::ok();  // its window has run
  }
  CHIMERA_RETURN_IF_ERROR(impl_->checkHandle(t));
  return impl_->flush();
}

Status Session::layoutOf(TensorHandle t, Layout& out) const {
  CHIMERA_RETURN_IF_ERROR(impl_->checkHandle(t));
  out = impl_->window.values[t.index].layout;
  return Status::ok();
}

SessionStats Session::stats() const { return impl_->stats; }

const SessionOptions& Session::options() const { return impl_->options; }

const PlanCost& Session::cost() const { return *impl_->cost; }

void Session::setStream(Stream stream) { impl_->options.stream = stream; }

}  // namespace chimera
