// SPDX-License-Identifier: Apache-2.0
// One rank of a fault-injection run (driven by run_faults.py): runs one mismatch mode (or the
// long AllReduce a driver stalls with SIGSTOP, or a rank that never creates its backend, or a
// bad argument on one rank) through the public API with the environment's settings, and
// writes what this rank saw to OUTDIR/rank<R>.txt:
//   code=<status code> ms=<wall time of the mode> call_ms=<the faulty call> next=<ok|failed|->
//   data=<ok|wrong|-> message=<status message>
// `ms` runs from MPI_Init (backend creation included); `call_ms` times the call given the bad
// argument alone, and `next` says whether a good call made after it worked (bad-argument
// modes). `data` is checked only when the call returned ok: `wrong` is a silent wrong result.
// The process then waits (bounded) for the other ranks' reports and leaves with _Exit,
// never MPI_Finalize: after a Timeout, operations may still be pending.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chimera/chimera.h"
#include "chimera/executor.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/routed_exchange.hpp"
#include "chimera/session.hpp"

namespace chimera {
namespace {

struct Outcome {
  Status status;
  std::string data = "-";  // ok / wrong / - (not checked)
  double callMs = -1;      // bad-argument modes: the faulty call alone
  std::string next = "-";  // bad-argument modes: whether the good call after it worked
  double nextMs = -1;      // bad-argument modes: how long that call took
};

struct Run {
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  int rank = 0;
  AxisSet tp;
  AxisSet pp;
};

constexpr std::size_t kCount = 1024;  // 4 KiB of f32 per call

// Input of `rank` for call `call`: exact in f32 when summed over 4 ranks.
float inputValue(int rank, int call, std::size_t i) { return static_cast<float>(rank + 1 + 10 * call) + (i % 5); }

// Sum over the members of this rank's `axes` group of inputValue(member, call, i).
float groupSum(const Run& r, AxisSet axes, int call, std::size_t i) {
  float sum = 0;
  for (const int member : r.mesh.groupRanks(r.rank, axes)) sum += inputValue(member, call, i);
  return sum;
}

std::vector<float> inputs(int rank, int call, std::size_t count = kCount) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = inputValue(rank, call, i);
  return v;
}

// AllReduce(Sum) of inputs(call) over `axes`, checked when ok.
Outcome checkedAllReduce(Run& r, AxisSet axes, int call, std::size_t count = kCount, ReduceOp op = ReduceOp::Sum,
                         DataType dtype = DataType::F32) {
  std::vector<float> buf = inputs(r.rank, call, count);
  Outcome out{r.backend->allReduce(buf.data(), buf.data(), count, dtype, op, axes)};
  if (!out.status.isOk()) return out;
  out.data = "ok";
  for (std::size_t i = 0; i < count; ++i) {
    if (buf[i] != groupSum(r, axes, call, i)) out.data = "wrong";
  }
  return out;
}

Outcome modeCountAllReduce(Run& r) { return checkedAllReduce(r, r.tp, 0, r.rank == 0 ? kCount / 2 : kCount); }
Outcome modeDtype(Run& r) {
  return checkedAllReduce(r, r.tp, 0, kCount, ReduceOp::Sum, r.rank == 0 ? DataType::I32 : DataType::F32);
}
Outcome modeOp(Run& r) { return checkedAllReduce(r, r.tp, 0, kCount, r.rank == 0 ? ReduceOp::Max : ReduceOp::Sum); }

Outcome modeCountReduceScatter(Run& r) {
  const std::size_t block = r.rank == 0 ? kCount / 4 : kCount / 2;
  const std::vector<float> in = inputs(r.rank, 0, 2 * block);
  std::vector<float> out(block);
  Outcome o{r.backend->reduceScatter(in.data(), out.data(), block, DataType::F32, ReduceOp::Sum, r.tp)};
  if (!o.status.isOk()) return o;
  const int index = r.mesh.groupIndex(r.rank, r.tp);
  o.data = "ok";
  for (std::size_t i = 0; i < block; ++i) {
    if (out[i] != groupSum(r, r.tp, 0, index * block + i)) o.data = "wrong";
  }
  return o;
}

Outcome modeCountAllGather(Run& r) {
  const std::size_t count = r.rank == 0 ? kCount / 2 : kCount;
  const std::vector<float> in = inputs(r.rank, 0, count);
  std::vector<float> out(2 * count);
  Outcome o{r.backend->allGather(in.data(), out.data(), count, DataType::F32, r.tp)};
  if (!o.status.isOk()) return o;
  const std::vector<int> members = r.mesh.groupRanks(r.rank, r.tp);
  o.data = "ok";
  for (std::size_t m = 0; m < members.size(); ++m) {
    for (std::size_t i = 0; i < count; ++i) {
      if (out[m * count + i] != inputValue(members[m], 0, i)) o.data = "wrong";
    }
  }
  return o;
}

// Broadcast from group index `root` of `count` elements, checked against the root's input.
Outcome checkedBroadcast(Run& r, std::size_t count, int root) {
  std::vector<float> buf = inputs(r.rank, 0, count);
  Outcome o{r.backend->broadcast(buf.data(), buf.data(), count, DataType::F32, root, r.tp)};
  if (!o.status.isOk()) return o;
  const int rootRank = r.mesh.groupPeer(r.rank, r.tp, 0);  // both roots' data are checked against index 0's
  o.data = "ok";
  for (std::size_t i = 0; i < count; ++i) {
    if (buf[i] != inputValue(rootRank, 0, i)) o.data = "wrong";
  }
  return o;
}

Outcome modeCountBroadcast(Run& r) { return checkedBroadcast(r, r.rank == 0 ? kCount / 2 : kCount, 0); }
Outcome modeRoot(Run& r) { return checkedBroadcast(r, kCount, r.rank == 0 ? 1 : 0); }

Outcome modeKind(Run& r) {
  if (r.rank == 0) return checkedBroadcast(r, kCount, 0);
  return checkedAllReduce(r, r.tp, 0);
}

// The very first call differs in its axes (tp on rank 0, pp elsewhere): no group exists yet.
Outcome modeAxesFirst(Run& r) { return checkedAllReduce(r, r.rank == 0 ? r.tp : r.pp, 0); }

// tp works once; then rank 0 asks for pp (a new group) while the others reuse tp.
Outcome modeAxesLater(Run& r) {
  Outcome first = checkedAllReduce(r, r.tp, 0);
  if (!first.status.isOk() || first.data != "ok") return first;
  return checkedAllReduce(r, r.rank == 0 ? r.pp : r.tp, 1);
}

// Both groups exist; then rank 0 calls on tp while the others call on pp.
Outcome modeAxesSwapped(Run& r) {
  Outcome a = checkedAllReduce(r, r.tp, 0);
  if (!a.status.isOk() || a.data != "ok") return a;
  Outcome b = checkedAllReduce(r, r.pp, 1);
  if (!b.status.isOk() || b.data != "ok") return b;
  return checkedAllReduce(r, r.rank == 0 ? r.tp : r.pp, 2);
}

// Three identical AllReduces with different data; rank 0 skips the second. Every rank makes
// all its calls (as a program that does not check its data would): the first error is
// reported, and `data` is wrong when any call before it returned ok with wrong data.
Outcome modeSkippedCall(Run& r) {
  Outcome result{Status::ok(), "ok"};
  for (int call = 0; call < 3; ++call) {
    if (r.rank == 0 && call == 1) continue;
    const Outcome o = checkedAllReduce(r, r.tp, call);
    if (!o.status.isOk()) return {o.status, result.data};
    if (o.data == "wrong") result.data = "wrong";
  }
  return result;
}

// A chain that differs on rank 0 (allreduce:tp vs reducescatter:tp:0) through the Executor.
Outcome modeChain(Run& r) {
  ChainRequest request;
  request.spec = TensorSpec{{64, 16}, DataType::F32};
  Status status = Layout::parse("tp=P", r.mesh, request.from);
  if (status.isOk()) status = Chain::parse(r.rank == 0 ? "allreduce:tp" : "reducescatter:tp:0", r.mesh, request.chain);
  if (!status.isOk()) return {status};
  const std::size_t count = 64 * 16;
  std::vector<float> in = inputs(r.rank, 0, count);
  std::vector<float> out(count);
  Executor executor(*r.backend);
  return {executor.runChain(request, ChainMode::Baseline, in.data(), count * 4, out.data(), count * 4)};
}

// A Session window repeated three times; on the third, rank 3 alone changes its declaration.
Outcome modeSessionWindow(Run& r) {
  SessionOptions options;
  Status status = SessionOptions::fromEnvironment(options);
  std::unique_ptr<Session> session;
  if (status.isOk()) status = Session::create(*r.backend, options, session);
  Layout partial, sharded;
  if (status.isOk()) status = Layout::parse("tp=P", r.mesh, partial);
  if (status.isOk()) status = Layout::parse("tp=S0", r.mesh, sharded);
  const TensorSpec spec{{16, 8}, DataType::F32};
  std::vector<float> buffer(16 * 8);
  for (int step = 0; step < 3 && status.isOk(); ++step) {
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = inputValue(r.rank, 0, i);
    TensorHandle x, y;
    status = session->tensor(buffer.data(), buffer.size() * 4, spec, partial, x);
    if (status.isOk()) status = session->allReduce(x, r.tp, y);
    if (status.isOk()) status = (step == 2 && r.rank == 3) ? session->flush() : session->consume(y, sharded);
    if (status.isOk() && !(step == 2 && r.rank == 3)) status = session->flush();
  }
  return {status};
}

// A 64 MiB AllReduce over every rank, repeated; the driver stops one rank in the middle.
Outcome modeStall(Run& r, const std::string& dir) {
  const std::size_t count = std::size_t{16} << 20;
  std::vector<float> buf(count, 1.0f);
  { std::ofstream(dir + "/pid" + std::to_string(r.rank)) << getpid() << "\n"; }
  for (int i = 0; i < 1000; ++i) {
    Status status = r.backend->allReduce(buf.data(), buf.data(), count, DataType::F32, ReduceOp::Sum, r.mesh.allAxes());
    if (!status.isOk()) return {status};
    std::fill(buf.begin(), buf.end(), 1.0f);
  }
  return {Status::internal("the stalled rank was never stopped")};
}

// Bad-argument modes: the last rank alone passes a bad argument to one call of an entry point
// over the world; every rank must return an error within a second (InvalidArgument on the rank
// at fault, an error naming it on the others), and the same call with good arguments must then
// work on every rank. `call(bad)` makes the call; `bad` is true on the rank at fault only.
Outcome badArgument(Run& r, const std::function<Status(bool bad)>& call) {
  const bool bad = r.rank == r.mesh.size() - 1;
  const auto start = std::chrono::steady_clock::now();
  Outcome out{call(bad)};
  out.callMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto next = std::chrono::steady_clock::now();
  out.next = call(false).isOk() ? "ok" : "failed";
  out.nextMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - next).count();
  return out;
}

// badArgument through the C API: `call(bad, comm)` on a communicator over the run's mesh (its
// chimeraResult_t mirrors StatusCode).
Outcome badCApiArgument(Run& r, const std::function<chimeraResult_t(bool bad, chimeraComm_t comm)>& call) {
  chimeraComm_t comm = nullptr;
  if (chimeraCommInitMpi(&comm, r.mesh.toString().c_str()) != chimeraSuccess)
    return {Status::internal(std::string("chimeraCommInitMpi: ") + chimeraGetLastError())};
  Outcome out = badArgument(r, [&](bool bad) {
    const chimeraResult_t result = call(bad, comm);
    return result == chimeraSuccess ? Status::ok() : Status(static_cast<StatusCode>(result), chimeraGetLastError());
  });
  (void)chimeraCommDestroy(comm);
  return out;
}

// Axes that name no group of the mesh (a bit past its axes), on the public C++ API: the rank at
// fault cannot tell which group its peers wait in, so it announces the failure to every rank
// (Backend::announceFault); the peers' call gives up on it, and their backends are unusable after.
Outcome modeBadAxes(Run& r) {
  return badArgument(r, [&](bool bad) {
    std::vector<float> buf = inputs(r.rank, 0);
    const AxisSet axes = bad ? r.mesh.allAxes() | AxisSet::single(r.mesh.numAxes()) : r.mesh.allAxes();
    return r.backend->allReduce(buf.data(), buf.data(), kCount, DataType::F32, ReduceOp::Sum, axes);
  });
}

// The same through the C API: axes text naming an axis the mesh lacks.
Outcome modeBadCApiAxes(Run& r) {
  return badCApiArgument(r, [&](bool bad, chimeraComm_t comm) {
    std::vector<float> buf = inputs(r.rank, 0);
    return chimeraAllReduce(buf.data(), buf.data(), kCount, chimeraFloat32, chimeraSum, bad ? "pp+tpx" : "pp+tp", comm);
  });
}

Outcome modeBadAllReduce(Run& r) {
  return badArgument(r, [&](bool bad) {
    std::vector<float> buf = inputs(r.rank, 0);
    return r.backend->allReduce(bad ? nullptr : buf.data(), buf.data(), kCount, DataType::F32, ReduceOp::Sum,
                                r.mesh.allAxes());
  });
}

Outcome modeBadReduceScatter(Run& r) {
  return badArgument(r, [&](bool bad) {
    const std::vector<float> in = inputs(r.rank, 0, kCount * static_cast<std::size_t>(r.mesh.size()));
    std::vector<float> out(kCount);
    return r.backend->reduceScatter(in.data(), bad ? nullptr : out.data(), kCount, DataType::F32, ReduceOp::Sum,
                                    r.mesh.allAxes());
  });
}

Outcome modeBadAllGather(Run& r) {
  return badArgument(r, [&](bool bad) {
    const std::vector<float> in = inputs(r.rank, 0);
    std::vector<float> out(kCount * static_cast<std::size_t>(r.mesh.size()));
    return r.backend->allGather(in.data(), bad ? nullptr : out.data(), kCount, DataType::F32, r.mesh.allAxes());
  });
}

Outcome modeBadAllToAll(Run& r) {
  return badArgument(r, [&](bool bad) {
    std::vector<float> in = inputs(r.rank, 0, kCount * static_cast<std::size_t>(r.mesh.size()));
    std::vector<float> out(in.size());
    return r.backend->allToAll(in.data(), bad ? in.data() : out.data(), kCount, DataType::F32,
                               r.mesh.allAxes());  // in place is not allowed
  });
}

Outcome modeBadBroadcast(Run& r) {
  return badArgument(r, [&](bool bad) {
    std::vector<float> buf = inputs(r.rank, 0);
    return r.backend->broadcast(buf.data(), buf.data(), kCount, DataType::F32, bad ? r.mesh.size() : 0,
                                r.mesh.allAxes());  // a root outside the group
  });
}

// groupedP2P: every rank exchanges one block with every other (an all-to-all of transfers); the
// rank at fault passes a null receive buffer for one of them, so it refuses the whole call.
Outcome modeBadGroupedP2P(Run& r) {
  return badArgument(r, [&](bool bad) {
    const int n = r.mesh.size();
    std::vector<float> in = inputs(r.rank, 0, kCount * static_cast<std::size_t>(n));
    std::vector<float> out(in.size());
    std::vector<P2POp> ops;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r.rank) continue;
      const std::size_t at = kCount * static_cast<std::size_t>(peer);
      ops.push_back({P2POp::Kind::Send, in.data() + at, kCount, DataType::F32, peer});
      ops.push_back({P2POp::Kind::Recv, bad && peer == 0 ? nullptr : out.data() + at, kCount, DataType::F32, peer});
    }
    return r.backend->groupedP2P(ops);
  });
}

// send / recv between pairs (odd rank sends to the even one below it): the sender at fault
// passes a null buffer and never sends. Its receiver must fail at once naming it; the other
// pairs are not involved and complete.
Outcome modeBadSend(Run& r) {
  return badArgument(r, [&](bool bad) {
    std::vector<float> buf = inputs(r.rank, 0);
    if (r.rank % 2 == 1) return r.backend->send(bad ? nullptr : buf.data(), kCount, DataType::F32, r.rank - 1);
    return r.backend->recv(buf.data(), kCount, DataType::F32, r.rank + 1);
  });
}

// The C API: chimeraAllReduce over the world with an unknown reduction (a chimeraRedOp_t past
// the last) on one rank, a check of the C arguments made before the backend is reached.
Outcome modeBadCApiAllReduce(Run& r) {
  return badCApiArgument(r, [&](bool bad, chimeraComm_t comm) {
    std::vector<float> buf = inputs(r.rank, 0);
    return chimeraAllReduce(buf.data(), buf.data(), kCount, chimeraFloat32,
                            bad ? static_cast<chimeraRedOp_t>(99) : chimeraSum, "pp+tp", comm);
  });
}

// The C API: chimeraSend from each odd rank to the rank below with an unknown datatype (a
// chimeraDataType_t past the last) on one rank, a check made before the backend is reached.
Outcome modeBadCApiSend(Run& r) {
  return badCApiArgument(r, [&](bool bad, chimeraComm_t comm) {
    std::vector<float> buf = inputs(r.rank, 0);
    return r.rank % 2 == 1 ? chimeraSend(buf.data(), kCount, bad ? static_cast<chimeraDataType_t>(99) : chimeraFloat32,
                                         r.rank - 1, comm)
                           : chimeraRecv(buf.data(), kCount, chimeraFloat32, r.rank + 1, comm);
  });
}

// The Executor: a redistribution whose output buffer is too small on one rank.
Outcome modeBadExecutor(Run& r) {
  Executor executor(*r.backend);
  const TensorSpec spec{{64, 16}, DataType::F32};
  Layout from, to;
  Status status = Layout::parse("tp=S0", r.mesh, from);
  if (status.isOk()) status = Layout::parse("tp=R", r.mesh, to);
  if (!status.isOk()) return {status};
  return badArgument(r, [&](bool bad) {
    std::vector<float> in(64 * 16 / static_cast<std::size_t>(r.mesh.groupSize(r.tp)), 1.0f), out(64 * 16);
    return executor.redistribute(spec, from, to, in.data(), in.size() * 4, out.data(), (bad ? 8 : out.size()) * 4);
  });
}

// The Session: a window whose consume declares a layout of another shape on one rank.
Outcome modeBadSession(Run& r) {
  SessionOptions options;
  Status status = SessionOptions::fromEnvironment(options);
  std::unique_ptr<Session> session;
  if (status.isOk()) status = Session::create(*r.backend, options, session);
  Layout partial, sharded, wrong;
  if (status.isOk()) status = Layout::parse("tp=P", r.mesh, partial);
  if (status.isOk()) status = Layout::parse("tp=S0", r.mesh, sharded);
  if (status.isOk()) status = Layout::parse("tp=S2", r.mesh, wrong);
  if (!status.isOk()) return {status};
  const TensorSpec spec{{16, 8}, DataType::F32};
  std::vector<float> buffer(16 * 8);
  return badArgument(r, [&](bool bad) {
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = inputValue(r.rank, 0, i);
    TensorHandle x, y;
    Status st = session->tensor(buffer.data(), buffer.size() * 4, spec, partial, x);
    if (st.isOk()) st = session->allReduce(x, r.tp, y);
    // Sharded over a dim the tensor lacks: this rank's bad argument to consume.
    return st.isOk() ? session->consume(y, bad ? wrong : sharded) : st;
  });
}

// The routed modes' exchange: 2 experts per rank, K = 2, H = 4.
RoutedExchangeOptions routedOptions(const Mesh& mesh) {
  RoutedExchangeOptions options;
  options.numExperts = 2 * mesh.size();
  options.topK = 2;
  options.hidden = 4;
  return options;
}

// The routed modes' tokens: T = 6 rows of ones, each routed to two consecutive experts.
struct RoutedTokens {
  static constexpr std::int64_t T = 6;
  std::vector<float> x, w;
  std::vector<std::int64_t> ids;
  explicit RoutedTokens(const Mesh& mesh)
      : x(static_cast<std::size_t>(T * 4), 1.0f),
        w(static_cast<std::size_t>(T * 2), 0.5f),
        ids(static_cast<std::size_t>(T * 2)) {
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % (2 * mesh.size()));
  }
};

// The routed exchange: created with K = 0 on one rank (its communicators not made yet), then
// a dispatch with an expert id out of range on one rank.
Outcome modeBadRoutedCreate(Run& r) {
  return badArgument(r, [&](bool bad) {
    RoutedExchangeOptions options = routedOptions(r.mesh);
    if (bad) options.topK = 0;
    std::unique_ptr<RoutedExchange> exchange;
    return RoutedExchange::create(*r.backend, options, exchange);
  });
}

Outcome modeBadRoutedDispatch(Run& r) {
  RoutedExchangeOptions options = routedOptions(r.mesh);
  options.tokenLayout = "tp=R";
  std::unique_ptr<RoutedExchange> exchange;
  Status status = RoutedExchange::create(*r.backend, options, exchange);
  if (!status.isOk()) return {status};
  return badArgument(r, [&](bool bad) {
    RoutedTokens tokens(r.mesh);
    if (bad) tokens.ids.back() = options.numExperts;
    RoutedDispatch handle;
    return exchange->dispatch(tokens.x.data(), tokens.ids.data(), tokens.w.data(), RoutedTokens::T, handle);
  });
}

// A routed handle given to another exchange: two exchanges over the world dispatch the same
// tokens, and the rank at fault passes the first one's handle to the second one's combine.
Outcome modeBadRoutedHandle(Run& r) {
  const RoutedExchangeOptions options = routedOptions(r.mesh);
  std::unique_ptr<RoutedExchange> first, second;
  Status status = RoutedExchange::create(*r.backend, options, first);
  if (status.isOk()) status = RoutedExchange::create(*r.backend, options, second);
  if (!status.isOk()) return {status};
  return badArgument(r, [&](bool bad) {
    const RoutedTokens tokens(r.mesh);
    constexpr std::int64_t T = RoutedTokens::T;
    RoutedDispatch mine, other;
    Status done = first->dispatch(tokens.x.data(), tokens.ids.data(), tokens.w.data(), T, other);
    if (done.isOk()) done = second->dispatch(tokens.x.data(), tokens.ids.data(), tokens.w.data(), T, mine);
    std::vector<float> rows(static_cast<std::size_t>(mine.rows() * 4));
    if (done.isOk()) done = second->receive(mine, rows.data(), nullptr, nullptr);
    if (!done.isOk()) return done;
    std::vector<float> y(static_cast<std::size_t>(T * 4));
    return second->combine(rows.data(), nullptr, bad ? other : mine, y.data());
  });
}

void report(const std::string& dir, int rank, const Outcome& o, double ms) {
  std::string message = o.status.message();
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  const std::string path = dir + "/rank" + std::to_string(rank) + ".txt";
  {
    std::ofstream file(path + ".tmp");
    file << "code=" << statusCodeName(o.status.code()) << " ms=" << static_cast<long long>(ms)
         << " call_ms=" << static_cast<long long>(o.callMs) << " next=" << o.next
         << " next_ms=" << static_cast<long long>(o.nextMs) << " data=" << o.data << " message=" << message << "\n";
  }
  std::filesystem::rename(path + ".tmp", path);
}

// Waits until every rank reported or `lingerMs` passed, so that no rank's exit (which makes
// mpirun end the job) cuts off a peer that is about to report.
void linger(const std::string& dir, int size, long lingerMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lingerMs);
  while (std::chrono::steady_clock::now() < deadline) {
    int reported = 0;
    for (int r = 0; r < size; ++r) reported += std::filesystem::exists(dir + "/rank" + std::to_string(r) + ".txt");
    if (reported == size) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  using namespace chimera;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODE OUTDIR LINGER_MS\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const long lingerMs = std::strtol(argv[3], nullptr, 10);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const auto start = std::chrono::steady_clock::now();  // backend creation included
  Run r;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Status status = Mesh::parse("pp=2,tp=" + std::to_string(size / 2), size, r.mesh);
  if (status.isOk()) status = r.mesh.parseAxes("tp", r.tp);
  if (status.isOk()) status = r.mesh.parseAxes("pp", r.pp);
  // absent-rank: the last rank is busy elsewhere (sleeps past the others' timeout) instead of
  // creating its backend; the others' creation must time out naming it.
  const bool absent = mode == "absent-rank" && r.rank == size - 1;
  if (absent) std::this_thread::sleep_for(std::chrono::milliseconds(lingerMs));
  if (status.isOk() && !absent) status = createMpiBackend(r.mesh, r.backend);
  const std::map<std::string, std::function<Outcome(Run&)>> modes = {
      {"count-allreduce", modeCountAllReduce},
      {"count-reducescatter", modeCountReduceScatter},
      {"count-allgather", modeCountAllGather},
      {"count-broadcast", modeCountBroadcast},
      {"dtype", modeDtype},
      {"op", modeOp},
      {"kind", modeKind},
      {"root", modeRoot},
      {"axes-first", modeAxesFirst},
      {"axes-later", modeAxesLater},
      {"axes-swapped", modeAxesSwapped},
      {"skipped-call", modeSkippedCall},
      {"chain", modeChain},
      {"session-window", modeSessionWindow},
      {"stall", [&dir](Run& run) { return modeStall(run, dir); }},
      {"absent-rank", [](Run&) { return Outcome{Status::ok()}; }},
      {"bad-allreduce", modeBadAllReduce},
      {"bad-reducescatter", modeBadReduceScatter},
      {"bad-allgather", modeBadAllGather},
      {"bad-alltoall", modeBadAllToAll},
      {"bad-broadcast", modeBadBroadcast},
      {"bad-executor", modeBadExecutor},
      {"bad-session", modeBadSession},
      {"bad-routed-create", modeBadRoutedCreate},
      {"bad-routed-dispatch", modeBadRoutedDispatch},
      {"bad-grouped-p2p", modeBadGroupedP2P},
      {"bad-send", modeBadSend},
      {"bad-capi-allreduce", modeBadCApiAllReduce},
      {"bad-capi-send", modeBadCApiSend},
      {"bad-axes", modeBadAxes},
      {"bad-capi-axes", modeBadCApiAxes},
      {"bad-routed-handle", modeBadRoutedHandle},
  };
  Outcome outcome{status};
  if (status.isOk() && !absent) {
    const auto it = modes.find(mode);
    outcome = it == modes.end() ? Outcome{Status::invalidArgument("unknown mode " + mode)} : it->second(r);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report(dir, r.rank, outcome, ms);
  linger(dir, size, lingerMs);
  std::fflush(nullptr);
  std::_Exit(outcome.status.isOk() && outcome.data != "wrong" ? 0 : 1);
}
