// SPDX-License-Identifier: Apache-2.0
// The process group's send, recv and batches of them (startCoalescing / endCoalescing, what
// batch_isend_irecv issues); see process_group.hpp. CPU transfers go to the host transport's
// point-to-point channel, CUDA ones to the NCCL backend (a batch as one grouped call).
#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "process_group.hpp"
#include "staging.hpp"

namespace chimera::torch_ext {

using c10d::OpType;

WorkPtr ChimeraProcessGroup::pointToPoint(std::vector<at::Tensor>& tensors, int peer, int tag, bool isSend) {
  const char* name = isSend ? "send" : "recv";
  TORCH_CHECK((peer >= 0 || (!isSend && peer == -1)) && peer < size_ && peer != rank_, "chimera ", name, ": peer ",
              peer, " is not another rank of this group of ", size_);
  if (!isSend) return transfer(tensors, peer, tag, false);
  try {
    return transfer(tensors, peer, tag, true);
  } catch (const c10::Error& error) {
    // A send of a CPU tensor that failed here tells its receiver, which would otherwise wait
    // for its timeout; a CUDA receiver waits in NCCL, where no refusal reaches it.
    if (tensors.size() != 1 || !tensors[0].defined() || tensors[0].is_cpu())
      host_.p2p->refuse(peer, tag, error.what_without_backtrace());
    throw;
  }
}

WorkPtr ChimeraProcessGroup::transfer(std::vector<at::Tensor>& tensors, int peer, int tag, bool isSend) {
  const char* name = isSend ? "send" : "recv";
  requireOne(name, tensors);
  const int limit = host_.p2p->userTagLimit();
  if (tag < 0 || tag >= limit)
    check(name, Status::invalidArgument("tag " + std::to_string(tag) + " is outside [0, " + std::to_string(limit - 1) +
                                        "], the tags a caller may use (the ones above are chimera's own)"));
  startInline();
  const Target target = select(tensors[0], name);
  requireDenseOn(name, tensors[0], target.device);
  if (target.device.is_cpu()) {
    WorkPtr work = isSend ? host_.p2p->send(tensors[0], peer, tag) : host_.p2p->recv(tensors[0], peer, tag);
    if (coalescing_) posted_.push_back(work);
    return work;
  }
  TORCH_CHECK(peer >= 0, "chimera recv: a receive from any source needs a CPU tensor");
  if (coalescing_) {
    Queued q{target, tensors[0], std::nullopt, {}, nullptr};
    q.staged.emplace(tensors[0], isSend);
    q.op = {isSend ? P2POp::Kind::Send : P2POp::Kind::Recv, q.staged->data(), q.staged->bytes(), DataType::U8, peer};
    q.work = c10::make_intrusive<ChimeraWork>(rank_, isSend ? OpType::SEND : OpType::RECV, tensors, true);
    auto work = q.work;
    queued_.push_back(std::move(q));
    return work;
  }
  Staged t(tensors[0], isSend);
  check(name, isSend ? target.backend->send(t.data(), t.bytes(), DataType::U8, peer, target.stream)
                     : target.backend->recv(t.data(), t.bytes(), DataType::U8, peer, target.stream));
  if (!isSend) t.commit();
  return completedWork(rank_, isSend ? OpType::SEND : OpType::RECV, tensors);
}

WorkPtr ChimeraProcessGroup::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint(tensors, dstRank, tag, true);
}

WorkPtr ChimeraProcessGroup::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint(tensors, srcRank, tag, false);
}

WorkPtr ChimeraProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return pointToPoint(tensors, -1, tag, false);
}

void ChimeraProcessGroup::startCoalescing() {
  TORCH_CHECK(!coalescing_, "chimera startCoalescing: already coalescing");
  coalescing_ = true;
}

WorkPtr ChimeraProcessGroup::endCoalescing() {
  TORCH_CHECK(coalescing_, "chimera endCoalescing: startCoalescing was not called");
  coalescing_ = false;
  if (opThread_ != nullptr) opThread_->drain();
  std::vector<WorkPtr> posted = std::move(posted_);
  posted_.clear();
  std::vector<Queued> queued = std::move(queued_);
  queued_.clear();
  TORCH_CHECK(posted.empty() || queued.empty(), "chimera batch_isend_irecv: CPU and CUDA tensors in one batch");
  if (!posted.empty()) return c10::make_intrusive<BatchWork>(rank_, std::move(posted));
  std::vector<P2POp> ops;
  std::vector<at::Tensor> tensors;
  for (const auto& q : queued) {
    TORCH_CHECK(q.target.backend == queued.front().target.backend,
                "chimera batch_isend_irecv: CPU and CUDA tensors in one batch");
    TORCH_CHECK(q.target.stream == queued.front().target.stream,
                "chimera batch_isend_irecv: tensors queued on different streams");
    if (q.op.count > 0) ops.push_back(q.op);
    tensors.push_back(q.tensor);
  }
  if (!queued.empty())
    check("batch_isend_irecv", queued.front().target.backend->groupedP2P(ops, queued.front().target.stream));
  for (auto& q : queued) {
    if (q.op.kind == P2POp::Kind::Recv) q.staged->commit();
    q.work->complete();
  }
  return completedWork(rank_, OpType::COALESCED, tensors);
}

}  // namespace chimera::torch_ext
