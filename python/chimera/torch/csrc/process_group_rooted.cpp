// SPDX-License-Identifier: Apache-2.0
// The process group's rooted collectives, gather and scatter (see process_group.hpp): after one
// agreement round over the group, the root moves one block with every other rank as
// point-to-point transfers of one grouped call.
#include <c10/util/Exception.h>

#include <vector>

#include "process_group.hpp"
#include "staging.hpp"

namespace chimera::torch_ext {

using c10d::OpType;

WorkPtr ChimeraProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::GatherOptions& opts) {
  const bool root = rank_ == opts.rootRank;
  return collective("gather", OpType::GATHER, opts.asyncOp, firstOf(inputs),
                    root && !outputs.empty() ? outputs[0] : std::vector<at::Tensor>{},
                    [this, outputs, inputs, opts, root](const Target& target) {
                      requireOne("gather", inputs);
                      requireDenseOn("gather", inputs[0], target.device);
                      const int rootRank = requireRoot("gather", opts.rootRank, size_);
                      Staged in(inputs[0], true);
                      std::vector<Staged> staged;
                      std::vector<void*> blocks;
                      if (root) {
                        const std::vector<at::Tensor>& outs = rootBlocks("gather", "output", outputs, inputs[0]);
                        staged.reserve(outs.size());
                        for (const at::Tensor& out : outs) blocks.push_back(staged.emplace_back(out, false).data());
                      }
                      rootedTransfers(target, "gather", true, rootRank, inputs[0], in.data(), blocks);
                      for (auto& s : staged) s.commit();
                    });
}

WorkPtr ChimeraProcessGroup::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                     const c10d::ScatterOptions& opts) {
  return collective("scatter", OpType::SCATTER, opts.asyncOp, firstOf(outputs), outputs,
                    [this, outputs, inputs, opts](const Target& target) {
                      requireOne("scatter", outputs);
                      requireDenseOn("scatter", outputs[0], target.device);
                      const int rootRank = requireRoot("scatter", opts.rootRank, size_);
                      Staged out(outputs[0], false);
                      std::vector<at::Tensor> sources;
                      std::vector<void*> blocks;
                      if (rank_ == rootRank) {
                        for (const at::Tensor& in : rootBlocks("scatter", "input", inputs, outputs[0])) {
                          blocks.push_back(sources.emplace_back(in.contiguous()).data_ptr());
                        }
                      }
                      rootedTransfers(target, "scatter", false, rootRank, outputs[0], out.data(), blocks);
                      out.commit();
                    });
}

// The root's tensors of a gather (outputs) or scatter (inputs): one list of one tensor per rank,
// each of `own`'s size and dtype.
const std::vector<at::Tensor>& ChimeraProcessGroup::rootBlocks(const char* op, const char* what,
                                                               const std::vector<std::vector<at::Tensor>>& lists,
                                                               const at::Tensor& own) const {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size_, "chimera ", op, ": the root expects ",
              size_, " ", what, " tensors");
  for (int i = 0; i < size_; ++i) {
    const at::Tensor& t = lists[0][static_cast<std::size_t>(i)];
    requireDenseOn(op, t, own.device());
    TORCH_CHECK(bytesOf(t) == bytesOf(own) && t.scalar_type() == own.scalar_type(), "chimera ", op, ": ", what, " ", i,
                " does not match the size and dtype of this rank's tensor");
  }
  return lists[0];
}

// Between the root and every other rank, one block of `own`'s bytes each way of a gather
// (`gathering`: the others send, the root receives into `blocks[i]`) or a scatter (the root
// sends `blocks[i]`, the others receive into `mine`); the root's own block is a copy. Every
// rank's checks are done: the group first agrees on their verdicts, the block's size and the
// root (Backend::agreeOnArguments), so a rank that refused or passed another size or root fails
// every rank before any transfer.
void ChimeraProcessGroup::rootedTransfers(const Target& target, const char* op, bool gathering, int root,
                                          const at::Tensor& own, void* mine, const std::vector<void*>& blocks) {
  const std::size_t bytes = bytesOf(own);
  check(op, target.backend->agreeOnArguments(wholeGroup(), static_cast<std::int64_t>(bytes), root, Status::ok(),
                                             target.stream));
  std::vector<P2POp> ops;
  const P2POp::Kind atRoot = gathering ? P2POp::Kind::Recv : P2POp::Kind::Send;
  const P2POp::Kind elsewhere = gathering ? P2POp::Kind::Send : P2POp::Kind::Recv;
  if (rank_ == root) {
    for (int i = 0; i < size_; ++i) {
      void* block = blocks[static_cast<std::size_t>(i)];
      if (i == rank_) {
        check(op, gathering ? target.backend->copy(block, mine, bytes, target.stream)
                            : target.backend->copy(mine, block, bytes, target.stream));
      } else if (bytes > 0) {
        ops.push_back({atRoot, block, bytes, DataType::U8, i});
      }
    }
  } else if (bytes > 0) {
    ops.push_back({elsewhere, mine, bytes, DataType::U8, root});
  }
  check(op, target.backend->groupedP2P(ops, target.stream));
}

}  // namespace chimera::torch_ext
