// SPDX-License-Identifier: Apache-2.0
// From recorded calls to chains: which values are materialised, which pass through.
#include <algorithm>

#include "session/window.hpp"

namespace chimera::detail {
namespace {

struct Dataflow {
  std::vector<int> readers;   // per value: number of calls reading it
  std::vector<int> nextCall;  // per value: the call reading it when there is exactly one
};

Dataflow buildDataflow(const Window& window) {
  Dataflow flow;
  flow.readers.assign(window.values.size(), 0);
  flow.nextCall.assign(window.values.size(), -1);
  for (std::size_t c = 0; c < window.calls.size(); ++c) {
    const std::uint32_t in = window.calls[c].input;
    ++flow.readers[in];
    flow.nextCall[in] = static_cast<int>(c);
  }
  return flow;
}

}  // namespace

WindowStep singleStep(const Window& window, int callIndex, bool declared) {
  const WindowCall& call = window.calls[static_cast<std::size_t>(callIndex)];
  const WindowValue& in = window.values[call.input];
  WindowStep step;
  step.request.spec = in.spec;
  step.request.from = in.layout;
  step.request.chain.ops = {call.op};
  step.calls = {callIndex};
  step.input = call.input;
  step.output = call.output;
  step.declared = declared;
  if (declared) {
    step.request.consume = window.values[call.output].declared;
  } else if (call.inPlace) {
    step.kind = call.op.kind == ChainOp::Kind::AllReduce ? WindowStep::Kind::DirectAllReduce
                                                         : WindowStep::Kind::DirectBroadcast;
  }
  return step;
}

std::vector<WindowStep> analyseWindow(const Window& window, const std::vector<std::uint8_t>& aliased, bool fusion) {
  const Dataflow flow = buildDataflow(window);
  auto inForce = [&](std::uint32_t v) {
    return fusion && window.values[v].declared && flow.readers[v] == 0 && aliased[v] == 0;
  };
  // A value passes through (is not materialised) when exactly one call reads it, nothing else does.
  auto passes = [&](std::uint32_t v) {
    return fusion && window.values[v].producer >= 0 && flow.readers[v] == 1 && !window.values[v].declared &&
           aliased[v] == 0;
  };
  std::vector<WindowStep> steps;
  for (std::size_t c = 0; c < window.calls.size(); ++c) {
    if (passes(window.calls[c].input)) continue;  // this call continues an earlier chain
    std::vector<int> calls{static_cast<int>(c)};
    std::uint32_t last = window.calls[c].output;
    while (passes(last)) {
      calls.push_back(flow.nextCall[last]);
      last = window.calls[static_cast<std::size_t>(calls.back())].output;
    }
    if (calls.size() > 1 && !inForce(last)) {
      for (int call : calls) steps.push_back(singleStep(window, call, false));
      continue;
    }
    if (calls.size() == 1) {
      steps.push_back(singleStep(window, calls[0], inForce(last)));
      continue;
    }
    WindowStep step;
    const WindowValue& in = window.values[window.calls[c].input];
    step.request.spec = in.spec;
    step.request.from = in.layout;
    for (int call : calls) step.request.chain.ops.push_back(window.calls[static_cast<std::size_t>(call)].op);
    step.request.consume = window.values[last].declared;
    step.calls = calls;
    step.input = window.calls[c].input;
    step.output = last;
    step.declared = true;
    steps.push_back(std::move(step));
  }
  // Split chains were appended by first call already; keep the order stable by first call.
  std::stable_sort(steps.begin(), steps.end(),
                   [](const WindowStep& a, const WindowStep& b) { return a.calls.front() < b.calls.front(); });
  return steps;
}

}  // namespace chimera::detail
