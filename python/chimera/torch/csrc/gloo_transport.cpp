// SPDX-License-Identifier: Apache-2.0
// The gloo host transport (see host_transport.hpp): a chimera Backend whose collectives are
// c10d calls on gloo backends made from a c10d Store, so a launch without MPI (torchrun, a
// multi-process test harness) runs chimera's process group and plans on CPU tensors. Over a
// process group it serves that group alone (one axis); over a mesh (a DeviceMesh's ranks, any
// order) each group along an axis set gets its own gloo backend, made by its members under a
// store prefix naming the mesh, its creation and the group. Buffers are wrapped as tensors without
// copies; each call waits for its Work, bounded by the timeout. With CHIMERA_CHECK_ARGS (on by
// default, as on the MPI backend) every collective starts with the argument agreement of its group
// (common/agreement.hpp), one int64 MIN all-reduce on the group's gloo backend, so a rank whose
// own checks fail makes every member fail at once instead of waiting for it until the timeout.
// Every such round carries one more word, the stand-in marker: on a mesh backend a rank whose
// call fails before it knows the call's group (axes naming no group) records the failure in the
// store, and stands in for the round its group's members ask it to (gloo_fault_notices.hpp).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/op_kind.hpp"
#include "common/agreement.hpp"
#include "common/env.hpp"
#include "common/hash.hpp"
#include "common/host_identity.hpp"
#include "gloo_fault_notices.hpp"
#include "gloo_point_to_point.hpp"
#include "host_transport.hpp"

namespace chimera::torch_ext {
namespace {

// Transfers of chimera's own plans (gather, scatter, uneven all-to-all) share the gloo backend
// with the point-to-point channel (gloo_point_to_point.hpp): they use tags from here down (one
// per channel), above every tag of the channel's.
constexpr int kPlanTagTop = INT_MAX - 1;
// The direct ReduceScatter's blocks: below every plan channel's tag (channels are 8-bit); the
// lowest tag of the plans'.
constexpr int kReduceScatterTag = kPlanTagTop - 256;
// The manifests of groupedP2P's transfers (one per pair of ranks and call): below the direct
// ReduceScatter's.
constexpr int kManifestTag = kReduceScatterTag - 1;
static_assert(kGlooPointToPointTagTop < kManifestTag, "the point-to-point channel's tags reach the plans'");
// How often an agreement round on a mesh backend stops waiting on gloo to look at the fault
// notices (gloo's Work::wait with a bound leaves the all-reduce running when it returns).
constexpr std::chrono::milliseconds kNoticeTick{20};

// A pair's manifest of one groupedP2P call: what one rank sends the other and receives from it,
// in a fixed size (a gloo receive takes exactly the bytes it posted): whether the rank refuses
// (its own checks failed), then for its sends and its receives the number of ops, the elements
// in all and a hash of the (count, dtype) of each in order.
struct Manifest {
  std::int64_t refused = 0;
  std::int64_t ops[2] = {0, 0};       // sends, receives
  std::int64_t elements[2] = {0, 0};  // sends, receives
  std::int64_t hash[2] = {0, 0};      // sends, receives
};
constexpr std::size_t kManifestWords = sizeof(Manifest) / sizeof(std::int64_t);

// The manifest of this rank's `ops` with `peer`.
Manifest manifestWith(std::span<const P2POp> ops, int peer, bool refused) {
  Manifest m;
  m.refused = refused ? 1 : 0;
  detail::Hasher hash[2];
  for (const P2POp& op : ops) {
    if (op.peer != peer) continue;
    const int side = op.kind == P2POp::Kind::Send ? 0 : 1;
    m.ops[side] += 1;
    m.elements[side] += static_cast<std::int64_t>(op.count);
    hash[side].add(static_cast<std::uint64_t>(op.count));
    hash[side].add(static_cast<std::uint64_t>(op.dtype));
  }
  for (int side = 0; side < 2; ++side) m.hash[side] = hash[side].agreementValue();
  return m;
}

// Ok when what `sender` sends (`sends` side of its manifest) is what `receiver` receives.
Status compareSides(const Manifest& sending, const Manifest& receiving, int sender, int receiver) {
  if (sending.ops[0] == receiving.ops[1] && sending.elements[0] == receiving.elements[1] &&
      sending.hash[0] == receiving.hash[1])
    return Status::ok();
  return Status::mismatch("point-to-point: rank " + std::to_string(sender) + " sends rank " + std::to_string(receiver) +
                          " " + std::to_string(sending.ops[0]) + " transfer(s) of " +
                          std::to_string(sending.elements[0]) + " elements in all, and rank " +
                          std::to_string(receiver) + " receives " + std::to_string(receiving.ops[1]) +
                          " transfer(s) of " + std::to_string(receiving.elements[1]) +
                          " elements from it (or their counts or dtypes differ in order); nothing moved between them");
}

// The torch type of `dtype`; false for a value that is no DataType enumerator.
bool scalarTypeOf(DataType dtype, at::ScalarType& out) {
  switch (dtype) {
    case DataType::F32: out = at::kFloat; return true;
    case DataType::F64: out = at::kDouble; return true;
    case DataType::F16: out = at::kHalf; return true;
    case DataType::BF16: out = at::kBFloat16; return true;
    case DataType::I32: out = at::kInt; return true;
    case DataType::I64: out = at::kLong; return true;
    case DataType::U8: out = at::kByte; return true;
  }
  return false;
}

// The torch type of `dtype`, which the collective's checks found to be a DataType.
at::ScalarType scalarTypeOf(DataType dtype) {
  at::ScalarType type = at::kByte;
  TORCH_CHECK(scalarTypeOf(dtype, type), "dtype value ", static_cast<int>(dtype), " is no chimera DataType");
  return type;
}

// The checks a collective makes before its agreement, each InvalidArgument naming what is wrong.
Status checkDataType(DataType dtype) {
  at::ScalarType type = at::kByte;
  if (scalarTypeOf(dtype, type)) return Status::ok();
  return Status::invalidArgument("unknown dtype value " + std::to_string(static_cast<int>(dtype)));
}
Status checkReduceOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
    case ReduceOp::Min:
    case ReduceOp::Max:
    case ReduceOp::Avg: return Status::ok();
  }
  return Status::invalidArgument("unknown reduce op value " + std::to_string(static_cast<int>(op)));
}
Status checkBuffer(const void* ptr, std::size_t count, const char* what) {
  if (ptr != nullptr || count == 0) return Status::ok();
  return Status::invalidArgument(std::string(what) + " is null but count is " + std::to_string(count));
}
// The first error of `checks` (in order), else ok.
Status firstError(std::initializer_list<Status> checks) {
  for (const Status& s : checks)
    if (!s.isOk()) return s;
  return Status::ok();
}

// Element bytes of a dtype.
std::size_t elementBytes(DataType dtype) { return c10::elementSize(scalarTypeOf(dtype)); }

at::Tensor wrap(const void* data, std::size_t count, DataType dtype) {
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(count)},
                       at::TensorOptions().dtype(scalarTypeOf(dtype)).device(at::kCPU));
}

// A wait that reached its bound: thrown by bounded() (and so by GlooHostBackend::wait), turned
// into Status::timeout by guarded(). The kind of the failure decides, never its text.
class TimedOut : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `body`, which waits on gloo or the store; a failure that comes only after `timeout` has
// passed is a TimedOut (gloo's and the store's own timers are set to the same bound, and what
// they throw is no typed timeout), any other failure passes unchanged.
template <typename F>
void bounded(std::chrono::milliseconds timeout, F&& body) {
  const auto start = std::chrono::steady_clock::now();
  try {
    body();
  } catch (const TimedOut&) {
    throw;
  } catch (const std::exception& error) {
    if (std::chrono::steady_clock::now() - start >= timeout) throw TimedOut(error.what());
    throw;
  }
}

// Runs `body`, turning a TimedOut into Status::timeout and any other c10 error (a gloo failure)
// into Status::backendError.
template <typename F>
Status guarded(const char* what, F&& body) {
  try {
    body();
    return Status::ok();
  } catch (const TimedOut& error) {
    return Status::timeout(std::string(what) + " over gloo: " + error.what());
  } catch (const std::exception& error) {
    return Status::backendError(std::string(what) + " over gloo: " + error.what());
  }
}

// Makes the gloo backend of this rank's group along `axes` (collective over its members).
using GroupFactory = std::function<c10::intrusive_ptr<c10d::Backend>(AxisSet axes)>;

class GlooHostBackend final : public chimera::Backend {
 public:
  // Over `mesh`, as its rank `rank`: `whole` is the gloo backend of the whole mesh (every
  // collective over all axes, and point-to-point by mesh rank); `factory` makes the others
  // (none: `mesh` has one axis, whose group is `whole`).
  // `checkArgs`: CHIMERA_CHECK_ARGS, read at creation (every collective agrees on its arguments).
  GlooHostBackend(Mesh mesh, int rank, c10::intrusive_ptr<c10d::Backend> whole, GroupFactory factory,
                  std::int64_t timeoutMs, bool checkArgs)
      : mesh_(std::move(mesh)),
        rank_(rank),
        hosts_(static_cast<std::size_t>(mesh_.size()), 0),
        factory_(std::move(factory)),
        timeout_(timeoutMs),
        checkArgs_(checkArgs) {
    groups_.emplace(mesh_.allAxes().bits(), std::move(whole));
  }

  // Where the ranks run (hostOfRank): every member's host key gathered over the whole mesh's
  // group, bounded by the timeout. Collective over the mesh; once, at creation.
  Status findHosts() {
    c10d::Backend& whole = *groups_.at(mesh_.allAxes().bits());
    return guarded("finding the host of every rank", [&] {
      at::Tensor mine = at::empty({1}, at::kLong);
      mine.fill_(static_cast<std::int64_t>(detail::thisHostKey()));
      at::Tensor all = at::empty({mesh_.size()}, at::kLong);
      wait(whole._allgather_base(all, mine, c10d::AllgatherOptions()));
      std::vector<std::uint64_t> keys(static_cast<std::size_t>(mesh_.size()));
      std::memcpy(keys.data(), all.data_ptr(), keys.size() * sizeof(std::uint64_t));
      hosts_ = detail::hostsOfKeys(keys);
    });
  }

  // Takes in fault notices through `store` under `prefix` (the mesh's creation).
  void takeNotices(c10::intrusive_ptr<c10d::Store> store, std::string prefix) {
    notices_ = std::make_unique<GlooFaultNotices>(std::move(store), std::move(prefix), rank_, mesh_.size());
  }

  // This rank's call failed before its group was known: recorded in the store, and the rank
  // stands in for the round its group's members wait in (a mesh backend with argument checks).
  Status announceFault(const Status& local) override {
    if (local.isOk() || !checkArgs_ || notices_ == nullptr) return local;
    notices_->announce(
        local, [this](std::int64_t key) { return membersOf(key); },
        [this](std::int64_t key, int words) {
          const auto it = groups_.find(static_cast<std::uint32_t>(key));
          if (it == groups_.end() || words < 1) return false;
          std::vector<std::int64_t> sent = detail::standInWords(words, rank_);
          return guarded("standing in for a failed call", [&] { reduceMin(*it->second, sent); }).isOk();
        });
    return local;
  }

  std::string_view name() const override { return "gloo"; }
  const Mesh& mesh() const override { return mesh_; }
  std::string defaultTopology() const override { return hostsTopologyName(hosts_); }
  std::vector<int> hostOfRank() const override { return hosts_; }
  int rank() const override { return rank_; }

  Status allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, AxisSet axes,
                   Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "allReduce", gloo); !s.isOk()) return s;
    const Status local =
        firstError({checkDataType(dtype), checkReduceOp(op), checkBuffer(send, count, "allReduce send buffer"),
                    checkBuffer(recv, count, "allReduce recv buffer")});
    if (Status s = agree(axes, gloo, {OpKind::AllReduce, static_cast<std::int64_t>(count), dtype, op, 0}, local);
        !s.isOk())
      return s;
    if (count == 0) return Status::ok();
    if (send != recv) std::memmove(recv, send, count * elementBytes(dtype));
    if (gloo == nullptr) return Status::ok();
    return guarded("allReduce", [&] {
      std::vector<at::Tensor> tensors{wrap(recv, count, dtype)};
      c10d::AllreduceOptions options;
      options.reduceOp = c10dOp(op);
      wait(gloo->allreduce(tensors, options));
      if (op == ReduceOp::Avg) tensors[0].div_(gloo->getSize());
    });
  }
  // Direct, over the whole mesh's point-to-point channel: member i sends block j of its input to
  // member j, all at once, and reduces the n blocks it receives in group-index order. Each rank
  // moves (n-1)/n of its input once; gloo's all-reduce moves it twice, and its own reduce-scatters
  // are slower still (docs/torch_design.md).
  Status reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op, AxisSet axes,
                       Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "reduceScatter", gloo); !s.isOk()) return s;
    const Status local =
        firstError({checkDataType(dtype), checkReduceOp(op), checkBuffer(send, recvCount, "reduceScatter send buffer"),
                    checkBuffer(recv, recvCount, "reduceScatter recv buffer")});
    if (Status s =
            agree(axes, gloo, {OpKind::ReduceScatter, static_cast<std::int64_t>(recvCount), dtype, op, 0}, local);
        !s.isOk())
      return s;
    if (recvCount == 0) return Status::ok();
    if (gloo == nullptr) return copy(recv, send, recvCount * elementBytes(dtype), nullptr);
    const std::vector<int> members = mesh_.groupRanks(rank_, axes);
    const int n = static_cast<int>(members.size());
    const int me = mesh_.groupIndex(rank_, axes);
    c10d::Backend& whole = *groups_.at(mesh_.allAxes().bits());
    return guarded("reduceScatter", [&] {
      const auto count = static_cast<int64_t>(recvCount);
      at::Tensor input = wrap(send, recvCount * static_cast<std::size_t>(n), dtype);
      at::Tensor blocks = at::empty({n, count}, input.options());  // row i: member i's part of this block
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (int i = 1; i < n; ++i) {
        const int to = (me + i) % n;
        const int from = (me - i + n) % n;
        std::vector<at::Tensor> outgoing{input.narrow(0, to * count, count)};
        works.push_back(whole.send(outgoing, members[static_cast<std::size_t>(to)], kReduceScatterTag));
        std::vector<at::Tensor> incoming{blocks[from]};
        works.push_back(whole.recv(incoming, members[static_cast<std::size_t>(from)], kReduceScatterTag));
      }
      blocks[me].copy_(input.narrow(0, me * count, count));
      for (auto& work : works) wait(work);
      at::Tensor result = wrap(recv, recvCount, dtype);
      result.copy_(blocks[0]);
      for (int i = 1; i < n; ++i) {
        switch (op) {
          case ReduceOp::Sum:
          case ReduceOp::Avg: result.add_(blocks[i]); break;
          case ReduceOp::Prod: result.mul_(blocks[i]); break;
          case ReduceOp::Min: at::minimum_out(result, result, blocks[i]); break;
          case ReduceOp::Max: at::maximum_out(result, result, blocks[i]); break;
        }
      }
      if (op == ReduceOp::Avg) result.div_(n);
    });
  }
  Status allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes, Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "allGather", gloo); !s.isOk()) return s;
    const Status local = firstError({checkDataType(dtype), checkBuffer(send, sendCount, "allGather send buffer"),
                                     checkBuffer(recv, sendCount, "allGather recv buffer")});
    if (Status s = agree(axes, gloo, {OpKind::AllGather, static_cast<std::int64_t>(sendCount), dtype}, local);
        !s.isOk())
      return s;
    if (sendCount == 0) return Status::ok();
    if (gloo == nullptr) return copy(recv, send, sendCount * elementBytes(dtype), nullptr);
    return guarded("allGather", [&] {
      at::Tensor input = wrap(send, sendCount, dtype).clone();  // send may alias recv (in place)
      at::Tensor output = wrap(recv, sendCount * static_cast<std::size_t>(gloo->getSize()), dtype);
      wait(gloo->_allgather_base(output, input, c10d::AllgatherOptions()));
    });
  }
  Status allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes,
                  Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "allToAll", gloo); !s.isOk()) return s;
    Status local = firstError({checkDataType(dtype), checkBuffer(send, countPerPeer, "allToAll send buffer"),
                               checkBuffer(recv, countPerPeer, "allToAll recv buffer")});
    if (local.isOk() && countPerPeer > 0 && send == recv)
      local = Status::invalidArgument("allToAll is out-of-place only, but send == recv");
    if (Status s = agree(axes, gloo, {OpKind::AllToAll, static_cast<std::int64_t>(countPerPeer), dtype}, local);
        !s.isOk())
      return s;
    if (countPerPeer == 0) return Status::ok();
    if (gloo == nullptr) return copy(recv, send, countPerPeer * elementBytes(dtype), nullptr);
    return guarded("allToAll", [&] {
      const std::size_t total = countPerPeer * static_cast<std::size_t>(gloo->getSize());
      at::Tensor input = wrap(send, total, dtype);
      at::Tensor output = wrap(recv, total, dtype);
      std::vector<int64_t> splits;
      wait(gloo->alltoall_base(output, input, splits, splits, c10d::AllToAllOptions()));
    });
  }
  Status broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes,
                   Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "broadcast", gloo); !s.isOk()) return s;
    const int size = mesh_.groupSize(axes);
    const bool isRoot = mesh_.groupIndex(rank_, axes) == root;
    Status local = checkDataType(dtype);
    if (local.isOk() && (root < 0 || root >= size))
      local = Status::invalidArgument("broadcast root " + std::to_string(root) + " is not a group index of axes " +
                                      mesh_.axesName(axes) + " (size " + std::to_string(size) + ")");
    if (local.isOk() && isRoot) local = checkBuffer(send, count, "broadcast send buffer (root)");
    if (local.isOk()) local = checkBuffer(recv, count, "broadcast recv buffer");
    if (Status s =
            agree(axes, gloo, {OpKind::Broadcast, static_cast<std::int64_t>(count), dtype, ReduceOp::Sum, root}, local);
        !s.isOk())
      return s;
    if (count == 0) return Status::ok();
    if (isRoot && send != recv) std::memmove(recv, send, count * elementBytes(dtype));
    if (gloo == nullptr) return Status::ok();
    return guarded("broadcast", [&] {
      std::vector<at::Tensor> tensors{wrap(recv, count, dtype)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      wait(gloo->broadcast(tensors, options));
    });
  }
  Status refuseCollective(AxisSet axes, const Status& local, Stream) override {
    if (local.isOk()) return Status::invalidArgument("refuseCollective: the local status must be an error");
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "refuseCollective", gloo); !s.isOk()) return s;
    return agree(axes, gloo, detail::CallSignature{}, local);
  }
  Status agreeOnArguments(AxisSet axes, std::int64_t count, int root, const Status& local, Stream) override {
    c10d::Backend* gloo = nullptr;
    if (Status s = groupOf(axes, "agreeOnArguments", gloo); !s.isOk()) return s;
    return agree(axes, gloo, {OpKind::ManyToMany, count, DataType::U8, ReduceOp::Sum, root}, local);
  }
  Status send(const void* buf, std::size_t count, DataType dtype, int peer, Stream) override {
    const P2POp op{P2POp::Kind::Send, const_cast<void*>(buf), count, dtype, peer};
    return groupedP2P(std::span<const P2POp>(&op, 1), nullptr);
  }
  Status recv(void* buf, std::size_t count, DataType dtype, int peer, Stream) override {
    const P2POp op{P2POp::Kind::Recv, buf, count, dtype, peer};
    return groupedP2P(std::span<const P2POp>(&op, 1), nullptr);
  }
  Status groupedP2P(std::span<const P2POp> ops, Stream) override {
    Status local = Status::ok();
    for (const P2POp& op : ops) {
      if (op.peer < 0 || op.peer >= mesh_.size() || op.peer == rank_)
        local = Status::invalidArgument("groupedP2P: peer " + std::to_string(op.peer) + " is not another rank");
      else if (op.box != nullptr)
        local = Status::invalidArgument("groupedP2P: a box (P2POp::box), which the gloo mesh backend does not move");
      else
        local = checkDataType(op.dtype);
      if (!local.isOk()) break;
    }
    std::set<int> failedPeers;
    const Status agreed = agreeOnTransfers(ops, local, failedPeers);
    if (!local.isOk()) return local;
    c10d::Backend& whole = *groups_.at(mesh_.allAxes().bits());
    const Status moved = guarded("groupedP2P", [&] {
      // Every transfer is posted before any is waited for: gloo's send and recv do not block.
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (const P2POp& op : ops) {
        if (op.count == 0 || failedPeers.contains(op.peer)) continue;
        std::vector<at::Tensor> tensors{wrap(op.buffer, op.count, op.dtype)};
        const int tag = kPlanTagTop - op.channel;
        works.push_back(op.kind == P2POp::Kind::Send ? whole.send(tensors, op.peer, tag)
                                                     : whole.recv(tensors, op.peer, tag));
      }
      for (auto& work : works) wait(work);
    });
    return moved.isOk() ? agreed : moved;
  }
  Status refuseTransfers(std::span<const P2POp> ops, const Status& local, Stream) override {
    if (local.isOk()) return Status::invalidArgument("refuseTransfers: the local status must be an error");
    std::set<int> failedPeers;
    const Status agreed = agreeOnTransfers(ops, local, failedPeers);
    return agreed.code() == StatusCode::Timeout || agreed.code() == StatusCode::BackendError ? agreed : local;
  }

  Status allocate(std::size_t bytes, void** out) override {
    if (out == nullptr || bytes == 0) return Status::invalidArgument("allocate: null output or 0 bytes");
    *out = ::operator new (bytes, std::align_val_t{64}, std::nothrow);
    return *out != nullptr ? Status::ok() : Status::backendError("allocate: out of host memory");
  }
  void deallocate(void* ptr) override {
    if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{64});
  }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream) override {
    if (bytes == 0) return Status::ok();
    if (dst == nullptr || src == nullptr) return Status::invalidArgument("copy with a null pointer");
    std::memmove(dst, src, bytes);
    return Status::ok();
  }
  Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed, DataType dtype,
                 Stream) override {
    return guarded("packBox", [&] {
      at::Tensor region = boxOf(tensor, shape, box, dtype);
      at::from_blob(packed, region.sizes(), region.options()).copy_(region);
    });
  }
  Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                   DataType dtype, Stream) override {
    return guarded("unpackBox", [&] {
      at::Tensor region = boxOf(tensor, shape, box, dtype);
      region.copy_(at::from_blob(const_cast<void*>(packed), region.sizes(), region.options()));
    });
  }
  Status scale(const void* input, void* output, std::size_t count, DataType dtype, double factor, Stream) override {
    if (count == 0) return Status::ok();
    return guarded("scale", [&] {
      at::Tensor in = wrap(input, count, dtype);
      at::Tensor scaled = in.to(at::kDouble).mul_(factor);
      if (!at::isFloatingType(in.scalar_type())) {
        // Integers: truncated toward zero, saturated, as the host backends do.
        const at::Scalar low =
            in.scalar_type() == at::kByte ? 0 : (in.scalar_type() == at::kInt ? INT32_MIN : INT64_MIN);
        const at::Scalar high = in.scalar_type() == at::kByte
                                    ? 255
                                    : (in.scalar_type() == at::kInt ? INT32_MAX : static_cast<double>(INT64_MAX));
        scaled = scaled.trunc_().clamp_(low, high);
      }
      wrap(output, count, dtype).copy_(scaled);
    });
  }
  Status synchronize(Stream) override { return Status::ok(); }
  // Each rank makes the gloo backend of its own group along each axis set it lacks, in the order
  // given; the members of a group meet in the store (bounded by the timeout). Nothing is sent
  // when every group exists (always, without a factory: the mesh has one axis then). Otherwise
  // the ranks of the mesh first agree on the groups they are about to make, so that ranks asking
  // for different groups at once all fail with Mismatch instead of waiting in the store.
  Status createGroups(std::span<const AxisSet> groups) override {
    std::vector<AxisSet> missing;
    Status local = Status::ok();
    for (AxisSet axes : groups) {
      if (local.isOk()) local = checkAxes(axes, "createGroups");
      if (!hasGroup(axes) && std::find(missing.begin(), missing.end(), axes) == missing.end()) missing.push_back(axes);
    }
    // With every group present nothing is sent: peers wait in their next call, so a bad list is announced.
    if (missing.empty()) return announceFault(local);
    if (Status s = agreeOnNewGroups(missing, local); !s.isOk()) return s;
    for (AxisSet axes : missing) {
      c10::intrusive_ptr<c10d::Backend> gloo;
      const std::string what = "creating the gloo group of axes " + mesh_.axesName(axes);
      if (Status s = guarded(what.c_str(), [&] { bounded(timeout_, [&] { gloo = factory_(axes); }); }); !s.isOk())
        return s;
      groups_.emplace(axes.bits(), std::move(gloo));
    }
    return Status::ok();
  }
  bool hasGroup(AxisSet axes) const override {
    return checkAxes(axes, "hasGroup").isOk() && (mesh_.groupSize(axes) == 1 || groups_.count(axes.bits()) != 0);
  }

 private:
  // The argument agreement of a collective on `axes` (common/agreement.hpp) before its first
  // transfer: `local` is the verdict of this rank's own checks. Its MIN is one int64 all-reduce
  // on the group's gloo backend `gloo`, bounded by the timeout. Returns `local` without
  // communicating with CHIMERA_CHECK_ARGS off or in a group of one rank.
  Status agree(AxisSet axes, c10d::Backend* gloo, const detail::CallSignature& signature, const Status& local) {
    if (!checkArgs_ || gloo == nullptr || mesh_.groupSize(axes) == 1) return local;
    const std::string group = mesh_.axesName(axes);
    const std::string what = "argument agreement check of " + std::string(opKindInfo(signature.kind).call) +
                             " on axes " + group + " (rank " + std::to_string(rank_) + ")";
    const detail::GroupMin min = [&](std::span<std::int64_t> words) { return minOverGroup(axes, *gloo, words, what); };
    return detail::agreeOnCall(signature, local, rank_, group, min);
  }
  // The per-pair agreement of a groupedP2P call (CHIMERA_CHECK_ARGS), as the MPI backend's
  // (src/mpi/p2p_check.hpp) in one fixed-size manifest per pair: each rank sends every peer of
  // `ops` (a rank of the mesh) its manifest, or a refusal when `local` is an error, and takes
  // theirs. Returns Mismatch naming the first peer that refused or whose transfers differ from
  // this rank's (on both ends of the pair); `failedPeers` gets every such peer, whose transfers
  // must not run (a rank whose `local` failed runs none). Timeout when a peer's manifest does not come.
  Status agreeOnTransfers(std::span<const P2POp> ops, const Status& local, std::set<int>& failedPeers) const {
    std::vector<int> peers;
    for (const P2POp& op : ops) {
      if (op.peer >= 0 && op.peer < mesh_.size() && op.peer != rank_ &&
          std::find(peers.begin(), peers.end(), op.peer) == peers.end())
        peers.push_back(op.peer);
    }
    if (!checkArgs_ || peers.empty()) return Status::ok();
    std::vector<Manifest> mine(peers.size()), theirs(peers.size());
    for (std::size_t i = 0; i < peers.size(); ++i) mine[i] = manifestWith(ops, peers[i], !local.isOk());
    c10d::Backend& whole = *groups_.at(mesh_.allAxes().bits());
    const Status exchanged = guarded("point-to-point manifests", [&] {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        std::vector<at::Tensor> out{wrap(&mine[i], kManifestWords, DataType::I64)};
        std::vector<at::Tensor> in{wrap(&theirs[i], kManifestWords, DataType::I64)};
        works.push_back(whole.send(out, peers[i], kManifestTag));
        works.push_back(whole.recv(in, peers[i], kManifestTag));
      }
      for (auto& work : works) wait(work);
    });
    if (!exchanged.isOk()) return exchanged;
    Status first = Status::ok();
    for (std::size_t i = 0; i < peers.size(); ++i) {
      const int peer = peers[i];
      Status pair = Status::ok();
      if (theirs[i].refused != 0) {
        pair = detail::transfersRefused(peer, rank_);
      } else if (local.isOk()) {
        pair = compareSides(mine[i], theirs[i], rank_, peer);
        if (pair.isOk()) pair = compareSides(theirs[i], mine[i], peer, rank_);
      }
      if (!pair.isOk()) {
        failedPeers.insert(peer);
        if (first.isOk()) first = pair;
      }
    }
    return first;
  }
  // Every word replaced by its minimum over the group of `gloo` (collective over it).
  c10::intrusive_ptr<c10d::Work> startMin(c10d::Backend& gloo, std::span<std::int64_t> words) const {
    std::vector<at::Tensor> tensors{wrap(words.data(), words.size(), DataType::I64)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MIN;
    return gloo.allreduce(tensors, options);
  }
  void reduceMin(c10d::Backend& gloo, std::span<std::int64_t> words) const { wait(startMin(gloo, words)); }
  // An agreement round (the GroupMin of common/agreement.hpp) on this rank's group along `axes`
  // (`gloo` its backend): `words` and the stand-in marker, MIN-reduced. While it waits longer
  // than kGlooNoticeGrace it asks the group's ranks at fault to stand in (gloo_fault_notices.hpp);
  // Mismatch naming the one that did.
  Status minOverGroup(AxisSet axes, c10d::Backend& gloo, std::span<std::int64_t> words, const std::string& what) {
    std::vector<std::int64_t> sent(words.begin(), words.end());
    sent.push_back(detail::kStandInNeutral);
    const Status reduced = guarded(what.c_str(), [&] {
      const c10::intrusive_ptr<c10d::Work> work = startMin(gloo, sent);
      if (notices_ == nullptr) return wait(work);
      const std::vector<int> members = membersOf(axes.bits());
      const auto start = std::chrono::steady_clock::now();
      bounded(timeout_, [&] {
        // Nothing to look at before kGlooNoticeGrace: a round that completes sooner waits once
        // (a bounded wait that passes throws, which costs).
        std::chrono::milliseconds tick = kGlooNoticeGrace;
        for (;;) {
          try {
            if (work->wait(tick)) return;
          } catch (const std::exception&) {
            // The tick passed, unless the all-reduce completed meanwhile (then wait() returns, or
            // throws its failure).
            if (work->isCompleted()) {
              work->wait();
              return;
            }
          }
          tick = kNoticeTick;
          const auto waited = std::chrono::steady_clock::now() - start;
          if (waited >= timeout_)
            throw TimedOut("not completed within the timeout of " + std::to_string(timeout_.count()) + " ms");
          if (waited >= kGlooNoticeGrace) notices_->offer(axes.bits(), static_cast<int>(sent.size()), members);
        }
      });
    });
    if (!reduced.isOk()) return reduced;
    if (sent.back() != detail::kStandInNeutral) {
      const int culprit = static_cast<int>(sent.back());
      const std::string fault = notices_ != nullptr ? notices_->faultOf(culprit) : std::string();
      if (notices_ != nullptr) notices_->settle(culprit);
      return detail::stoodIn(what, culprit, fault);
    }
    std::copy_n(sent.begin(), words.size(), words.begin());
    return Status::ok();
  }
  // The mesh ranks of this rank's group along the axis set `bits`; empty when it is no group of the mesh.
  std::vector<int> membersOf(std::int64_t bits) const {
    const AxisSet axes = AxisSet::fromBits(static_cast<std::uint32_t>(bits));
    std::vector<int> members;
    if (bits <= 0 || !checkAxes(axes, "membersOf").isOk()) return members;
    const int color = mesh_.groupColor(rank_, axes);
    for (int r = 0; r < mesh_.size(); ++r) {
      if (mesh_.groupColor(r, axes) == color) members.push_back(r);
    }
    return members;
  }
  // The agreement of every rank of the mesh on the new groups (common/agreement.hpp), its MIN
  // an all-reduce over the whole mesh.
  Status agreeOnNewGroups(const std::vector<AxisSet>& groups, const Status& local) {
    detail::Hasher hash;  // the library's one hash, over the axis sets in order
    for (AxisSet axes : groups) hash.add(axes.bits());
    const std::string names = axesNames(groups);
    const std::string mesh = mesh_.toString();
    const std::string what =
        "agreeing on the new gloo groups [" + names + "] (mesh " + mesh + ", rank " + std::to_string(rank_) + ")";
    c10d::Backend& whole = *groups_.at(mesh_.allAxes().bits());
    const detail::GroupMin min = [&](std::span<std::int64_t> words) {
      return minOverGroup(mesh_.allAxes(), whole, words, what);
    };
    return detail::agreeOnNewGroups({hash.agreementValue(), names, "gloo groups", mesh}, local, rank_, min);
  }
  std::string axesNames(const std::vector<AxisSet>& groups) const {
    std::string names;
    for (AxisSet axes : groups) names += (names.empty() ? "" : ", ") + mesh_.axesName(axes);
    return names;
  }
  static c10d::ReduceOp c10dOp(ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return c10d::ReduceOp::SUM;
      case ReduceOp::Prod: return c10d::ReduceOp::PRODUCT;
      case ReduceOp::Min: return c10d::ReduceOp::MIN;
      case ReduceOp::Max: return c10d::ReduceOp::MAX;
      default: break;
    }
    TORCH_CHECK(false, "reduce op ", static_cast<int>(op), " is not supported over gloo");
  }
  Status checkAxes(AxisSet axes, const char* what) const {
    if (!axes.empty() && (axes.bits() & ~mesh_.allAxes().bits()) == 0) return Status::ok();
    return Status::invalidArgument(std::string(what) + ": axis set 0x" + hexBits(axes) + " is not a group of mesh " +
                                   mesh_.toString());
  }
  // The gloo backend of this rank's group along `axes`; nullptr for a group of one rank (the
  // collective is a local copy). InvalidArgument naming the group when it was not created, or
  // naming axes that are no group of the mesh (announced: the group its peers wait in is unknown).
  Status groupOf(AxisSet axes, const char* what, c10d::Backend*& out) {
    if (Status s = checkAxes(axes, what); !s.isOk()) return announceFault(s);
    out = nullptr;
    if (auto it = groups_.find(axes.bits()); it != groups_.end()) {
      out = it->second.get();
      return Status::ok();
    }
    if (mesh_.groupSize(axes) == 1) return Status::ok();
    return Status::invalidArgument(std::string(what) + ": the gloo group of axes " + mesh_.axesName(axes) + " (mesh " +
                                   mesh_.toString() + ") was not created on rank " + std::to_string(rank_) +
                                   ": call Backend::createGroups with it first");
  }
  static std::string hexBits(AxisSet axes) {
    char text[16];
    std::snprintf(text, sizeof text, "%x", axes.bits());
    return text;
  }
  // Waits for `work` at most the timeout: one still running then (c10d's Work::wait throws, or
  // returns with the work incomplete) is a TimedOut, as is one that failed only after the bound.
  void wait(const c10::intrusive_ptr<c10d::Work>& work) const {
    bounded(timeout_, [&] {
      try {
        work->wait(timeout_);
      } catch (const std::exception& error) {
        if (!work->isCompleted()) throw TimedOut(error.what());
        throw;
      }
      if (!work->isCompleted())
        throw TimedOut("not completed within the timeout of " + std::to_string(timeout_.count()) + " ms");
    });
  }
  at::Tensor boxOf(const void* tensor, std::span<const std::int64_t> shape, const Box& box, DataType dtype) const {
    TORCH_CHECK(tensor != nullptr && box.offset.size() == shape.size() && box.extent.size() == shape.size(),
                "a box of rank ", box.offset.size(), " for a tensor of rank ", shape.size());
    at::Tensor region = at::from_blob(const_cast<void*>(tensor), at::IntArrayRef(shape.data(), shape.size()),
                                      at::TensorOptions().dtype(scalarTypeOf(dtype)));
    for (std::size_t d = 0; d < shape.size(); ++d)
      region = region.narrow(static_cast<int64_t>(d), box.offset[d], box.extent[d]);
    return region;
  }
  Mesh mesh_;
  int rank_;
  std::vector<int> hosts_;                                             // the host of every mesh rank
  std::map<std::uint32_t, c10::intrusive_ptr<c10d::Backend>> groups_;  // by axis-set bits
  GroupFactory factory_;
  std::chrono::milliseconds timeout_;
  bool checkArgs_;                             // CHIMERA_CHECK_ARGS
  std::unique_ptr<GlooFaultNotices> notices_;  // a mesh backend's (through its store); none on a process group's
};

}  // namespace

Status createGlooTransport(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs, HostTransport& out) {
  if (!gloo) return Status::invalidArgument("gloo transport: no gloo backend");
  if (timeoutMs <= 0) return Status::invalidArgument("gloo transport: timeout of " + std::to_string(timeoutMs) + " ms");
  bool checkArgs = detail::kMpiCheckArgsByDefault;
  if (Status s = detail::checkArgsFromEnv(checkArgs, detail::kMpiCheckArgsByDefault); !s.isOk()) return s;
  const int rank = gloo->getRank();
  auto backend = std::make_unique<GlooHostBackend>(Mesh::flat(gloo->getSize(), "group"), rank, gloo, nullptr, timeoutMs,
                                                   checkArgs);
  if (Status s = backend->findHosts(); !s.isOk()) return s;
  out.backend = std::move(backend);
  out.p2p = makeGlooPointToPoint(std::move(gloo), timeoutMs);
  return Status::ok();
}

Status createGlooMeshBackend(const Mesh& mesh, std::span<const int> globalRanks, int globalRank,
                             c10::intrusive_ptr<c10d::Store> store, const GlooGroupMaker& makeGroup,
                             std::int64_t timeoutMs, std::unique_ptr<chimera::Backend>& out) {
  if (!store || !makeGroup) return Status::invalidArgument("gloo mesh backend: no store or no group maker");
  if (static_cast<int>(globalRanks.size()) != mesh.size())
    return Status::invalidArgument("gloo mesh backend: " + std::to_string(globalRanks.size()) + " ranks for mesh " +
                                   mesh.toString() + " of " + std::to_string(mesh.size()));
  int index = -1;
  std::set<int> seen;
  std::string ranks;
  for (std::size_t i = 0; i < globalRanks.size(); ++i) {
    const int r = globalRanks[i];
    if (r < 0 || !seen.insert(r).second)
      return Status::invalidArgument("gloo mesh backend: rank " + std::to_string(r) + " is negative or listed twice");
    if (r == globalRank) index = static_cast<int>(i);
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  if (index < 0)
    return Status::invalidArgument("gloo mesh backend: rank " + std::to_string(globalRank) +
                                   " is not one of the mesh's ranks " + ranks);
  if (timeoutMs <= 0)
    return Status::invalidArgument("gloo mesh backend: timeout of " + std::to_string(timeoutMs) + " ms");
  bool checkArgs = detail::kMpiCheckArgsByDefault;
  if (Status s = detail::checkArgsFromEnv(checkArgs, detail::kMpiCheckArgsByDefault); !s.isOk()) return s;
  // The mesh's name in the store (its axes and ranks). Each creation over it takes the next
  // generation: a rank finishes creation g only after every member counted itself in for g
  // (they all meet in the whole-mesh group next), so members agree on g without talking.
  const std::string name = "chimera/gloo_mesh/" + mesh.toString() + "@" + ranks;
  const std::string what = "creating the gloo mesh backend of mesh " + mesh.toString() + " over torch ranks " + ranks +
                           " (this is rank " + std::to_string(globalRank) + "; every rank must create it)";
  std::string prefix;
  const Status created = guarded(what.c_str(), [&] {
    bounded(std::chrono::milliseconds(timeoutMs), [&] {
      const std::int64_t arrivals = store->add(name + "/creations", 1);
      prefix = name + "/" + std::to_string((arrivals - 1) / mesh.size()) + "/";
      GroupFactory factory = [makeGroup, prefix, mesh, index, timeoutMs](AxisSet axes) {
        // One prefix per group: the axes, and the colour its members share.
        const std::string group =
            prefix + mesh.axesName(axes) + "/" + std::to_string(mesh.groupColor(index, axes)) + "/";
        return makeGroup(group, mesh.groupIndex(index, axes), mesh.groupSize(axes), timeoutMs);
      };
      c10::intrusive_ptr<c10d::Backend> whole = factory(mesh.allAxes());
      out = std::make_unique<GlooHostBackend>(mesh, index, std::move(whole), std::move(factory), timeoutMs, checkArgs);
    });
  });
  if (!created.isOk()) return created;
  auto& backend = static_cast<GlooHostBackend&>(*out);
  backend.takeNotices(store, prefix);
  return backend.findHosts();
}

}  // namespace chimera::torch_ext
