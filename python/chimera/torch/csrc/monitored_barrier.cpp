// SPDX-License-Identifier: Apache-2.0
// monitoredBarrier (see monitored_barrier.hpp). The answer rank 0 sends is one int32: 0 when
// every rank arrived, else 1 + the first rank that did not.
#include "monitored_barrier.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "work.hpp"

namespace chimera::torch_ext {
namespace {

std::string joined(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// A rank other than 0: reports to rank 0, then waits for its answer.
void reportAndAwait(HostPointToPoint& p2p, int rank, std::chrono::milliseconds answerTimeout) {
  const int tag = p2p.reservedTag();
  at::Tensor report = at::zeros({1}, at::kInt);
  at::Tensor answer = at::full({1}, -1, at::kInt);
  std::string problem;
  try {
    WorkPtr sent = p2p.send(report, 0, tag);
    WorkPtr answered = p2p.recv(answer, 0, tag);
    sent->wait(answerTimeout);
    answered->wait(answerTimeout);
  } catch (const std::exception& error) {
    problem = error.what();
  }
  const std::int32_t verdict = answer.item<std::int32_t>();
  if (problem.empty() && verdict == 0) return;
  if (problem.empty()) problem = "rank 0 reports that rank " + std::to_string(verdict - 1) + " failed to pass it";
  TORCH_CHECK(false, "Rank ", rank,
              " successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0 (",
              problem, ")");
}

}  // namespace

void monitoredBarrier(HostPointToPoint& p2p, int rank, int size, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds answerTimeout, bool waitAllRanks) {
  if (rank != 0) {
    reportAndAwait(p2p, rank, answerTimeout);
    return;
  }
  TORCH_CHECK(timeout.count() > 0, "Rank 0 timed out in monitoredBarrier after ", std::max<int64_t>(timeout.count(), 0),
              " ms (no time to wait for ranks 1 to ", size - 1, ")");
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  const int tag = p2p.reservedTag();
  std::vector<at::Tensor> reports;
  std::vector<WorkPtr> arrivals;
  for (int r = 1; r < size; ++r) {
    reports.push_back(at::zeros({1}, at::kInt));
    arrivals.push_back(p2p.recv(reports.back(), r, tag));
  }
  // Every report is waited for until the one deadline; a rank whose report is not in by then
  // did not arrive (without waitAllRanks, the first of them in rank order is named).
  std::vector<int> arrived;
  std::vector<int> late;
  for (int r = 1; r < size; ++r) {
    WorkPtr& arrival = arrivals[static_cast<std::size_t>(r - 1)];
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    bool in = false;
    try {  // past the deadline: 1 ms, enough for a report that is in
      in = arrival->wait(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      in = false;
    }
    (in ? arrived : late).push_back(r);
  }
  const std::int32_t verdict = late.empty() ? 0 : late.front() + 1;
  // Answer every rank that arrived, so none of them waits for its own timeout.
  at::Tensor answer = at::full({1}, verdict, at::kInt);
  std::vector<int> unanswered;
  for (int r : arrived) {
    try {
      p2p.send(answer, r, tag)->wait(std::max(timeout, std::chrono::milliseconds(1000)));
    } catch (const std::exception&) {
      unanswered.push_back(r);
    }
  }
  if (!late.empty()) {
    if (!waitAllRanks) late.resize(1);
    TORCH_CHECK(false, waitAllRanks ? "Ranks " : "Rank ", joined(late), " failed to pass monitoredBarrier in ",
                timeout.count(), " ms");
  }
  TORCH_CHECK(unanswered.empty(), "Ranks ", joined(unanswered),
              " reached monitoredBarrier but rank 0 could not release them: failed to pass monitoredBarrier in ",
              timeout.count(), " ms");
}

}  // namespace chimera::torch_ext
