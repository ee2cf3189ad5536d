// SPDX-License-Identifier: Apache-2.0
// Same-host peer reads with least privilege (docs/reliability.md, "Peer reads"): the ptrace
// permission chimera gives its peers (none unless Yama scope 1 asks for one, then the launcher,
// never every process of the user), only while a backend lives; and a sender that gave up on a
// box cannot be read from after it returned.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "chimera/tensor_spec.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "mpi/ptrace_permission.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {
namespace {

using detail::Ancestry;
using detail::decidePtraceGrant;

Ancestry ancestry(std::initializer_list<std::int64_t> pids) {
  Ancestry out{};
  std::copy(pids.begin(), pids.end(), out.begin());
  return out;
}

TEST(PtraceGrant, OnlyYamaScopeOneDeclaresAndOnlyTheSharedLauncher) {
  const Ancestry mine = ancestry({500, 400, 300});  // parent 500 (the launcher), then its parents
  const std::vector<Ancestry> siblings = {ancestry({500, 400, 300}), ancestry({500, 400, 300})};
  // Nobody refused: nothing to declare, whatever the scope.
  for (const int scope : {-1, 0, 1, 2, 3}) EXPECT_EQ(decidePtraceGrant(scope, mine, {}).tracer, 0) << scope;
  // No Yama or scope 0: the classic rule already lets the user's processes read; 2 and 3: a
  // declaration cannot help.
  for (const int scope : {-1, 0, 2, 3}) EXPECT_EQ(decidePtraceGrant(scope, mine, siblings).tracer, 0) << scope;
  // Scope 1: the nearest shared ancestor, the launcher of the siblings.
  EXPECT_EQ(decidePtraceGrant(1, mine, siblings).tracer, 500);
  // A peer started under another daemon of the same mpirun: their shared ancestor.
  const std::vector<Ancestry> cousins = {ancestry({500, 400, 300}), ancestry({450, 400, 300})};
  EXPECT_EQ(decidePtraceGrant(1, mine, cousins).tracer, 400);
  // Nothing shared below init: no declaration (the pair packs), never every process.
  const std::vector<Ancestry> stranger = {ancestry({700, 600})};
  const detail::PtraceGrant none = decidePtraceGrant(1, mine, stranger);
  EXPECT_EQ(none.tracer, 0);
  EXPECT_NE(none.reason.find("pack"), std::string::npos) << none.reason;
}

TEST(PtraceGrant, ReadsTheYamaScopeFile) {
  const std::string path = std::filesystem::temp_directory_path() / ("chimera-yama-" + std::to_string(getpid()));
  { std::ofstream(path) << "1\n"; }
  EXPECT_EQ(detail::yamaPtraceScope(path.c_str()), 1);
  { std::ofstream(path) << "not a scope\n"; }
  EXPECT_EQ(detail::yamaPtraceScope(path.c_str()), -1);
  std::filesystem::remove(path);
  EXPECT_EQ(detail::yamaPtraceScope(path.c_str()), -1);
}

TEST(PtraceGrant, OwnAncestryStartsAtTheParent) {
  const Ancestry mine = detail::ownAncestry();
  EXPECT_EQ(mine[0], getppid() > 1 ? getppid() : 0);
  EXPECT_EQ(std::find(mine.begin(), mine.end(), 1), mine.end()) << "init is never a candidate";
}

// Drops CAP_SYS_PTRACE from this process (a child of a test): a root test process would read
// anything, Yama or not.
void dropPtraceCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return;
  data[0].effective &= ~(1u << CAP_SYS_PTRACE);
  data[0].permitted &= ~(1u << CAP_SYS_PTRACE);
  (void)syscall(SYS_capset, &header, data);
}

// Whether a process of this user that is not a descendant of this job's launcher (forked twice,
// so that it is re-parented), without CAP_SYS_PTRACE, reads `word` of this process; `adopted`
// says whether its new parent is an ancestor of this rank (a subreaper launcher), in which case
// the launcher's declaration does cover it.
bool strangerReads(const std::uint64_t& word, bool& adopted) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child == 0) {
    const pid_t middle = getpid();
    if (fork() == 0) {
      for (int i = 0; i < 5000 && getppid() == middle; ++i) usleep(1000);
      dropPtraceCapability();
      std::uint64_t value = 0;
      iovec mine{&value, sizeof(value)};
      iovec theirs{const_cast<std::uint64_t*>(&word), sizeof(value)};
      const bool read = process_vm_readv(self, &mine, 1, &theirs, 1, 0) == sizeof(value) && value == word;
      const std::int64_t answer[2] = {read ? 1 : 0, static_cast<std::int64_t>(getppid())};
      (void)!write(fds[1], answer, sizeof(answer));
      _exit(0);
    }
    _exit(0);
  }
  close(fds[1]);
  waitpid(child, nullptr, 0);
  std::int64_t answer[2] = {0, 0};
  pollfd ready{fds[0], POLLIN, 0};
  if (poll(&ready, 1, 10000) == 1) (void)!read(fds[0], answer, sizeof(answer));
  close(fds[0]);
  const Ancestry mine = detail::ownAncestry();
  adopted = std::find(mine.begin(), mine.end(), answer[1]) != mine.end();
  return answer[0] != 0;
}

// Before a backend, while it lives and after: chimera declares a ptracer only under Yama scope
// 1 and only an ancestor of this rank (never every process), and clears it when the backend
// goes; with peer reads off it declares nothing.
TEST(PeerReadPermission, OnlyWhileTheBackendLivesAndOnlyWhereYamaAsks) {
  const int scope = detail::yamaPtraceScope();
  const Ancestry ancestors = detail::ownAncestry();
  bool ok = detail::declaredPtracer() == 0;
  EXPECT_TRUE(ok) << "a ptracer was declared before any backend";
  for (const bool read : {true, false}) {
    detail::MpiBackendOptions options;
    options.peerRead = read;
    std::unique_ptr<Backend> backend;
    const Status status = detail::createMpiBackend(Mesh::flat(worldSize()), options, backend);
    ASSERT_TRUE(status.isOk()) << status.toString();
    const std::int64_t during = detail::declaredPtracer();
    if (!read || scope != 1) {
      EXPECT_EQ(during, 0) << "Yama scope " << scope << ", reads " << read << ": nothing to declare";
      ok = ok && during == 0;
    } else {
      const bool ancestor = during == 0 || std::find(ancestors.begin(), ancestors.end(), during) != ancestors.end();
      EXPECT_TRUE(ancestor) << "declared pid " << during << " is not an ancestor of this rank";
      ok = ok && ancestor;
      // Least privilege: a process of this user outside the launcher's tree cannot read this rank.
      const std::uint64_t word = 0x5eed0000u + static_cast<std::uint64_t>(worldRank());
      bool adopted = false;
      const bool stranger = strangerReads(word, adopted);
      if (!adopted) {
        EXPECT_FALSE(stranger) << "a process outside the job's launcher read this rank's memory";
        ok = ok && !stranger;
      }
    }
    backend.reset();
    const std::int64_t after = detail::declaredPtracer();
    EXPECT_EQ(after, 0) << "the declaration outlived the backend";
    ok = ok && after == 0;
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

// A sender that gave up on a box (its reader came late) revokes its lease before returning: the
// late reader, which finds the box's address already delivered, must not return the tensor the
// sender's caller changed since as if it were the box it sent.
TEST(PeerReadPermission, ASenderThatTimedOutCannotBeReadFrom) {
  detail::MpiBackendOptions options;
  options.timeoutMs = 300;
  options.checkArgs = false;  // the late reader must find the address, not an argument check
  options.abortOnTimeout = false;
  std::unique_ptr<Backend> backend;
  const Status created = detail::createMpiBackend(Mesh::flat(worldSize()), options, backend);
  ASSERT_TRUE(created.isOk()) << created.toString();
  const int me = worldRank();
  const bool able = me > 1 || (worldSize() >= 2 && backend->movesBoxes(me ^ 1));
  if (!allRanksAgree(able))
    GTEST_SKIP() << "ranks 0 and 1 do not read each other's memory (another host, or CHIMERA_MPI_PEER_READ=0)";
  const std::vector<std::int64_t> shape = {4, 8};
  const Box box{{0, 0}, {4, 8}};
  std::vector<float> tensor(32, me == 0 ? 1.0f : 0.0f);
  constexpr float kChanged = 7.0f;
  constexpr int kChangedTag = 0x4c45;  // 'LE'
  bool ok = true;
  if (me == 0) {
    const P2POp op{P2POp::Kind::Send, tensor.data(), 32, DataType::F32, 1, 0, &box, shape};
    const Status sent = backend->groupedP2P({&op, 1});
    EXPECT_EQ(sent.code(), StatusCode::Timeout) << sent.toString();
    ok = sent.code() == StatusCode::Timeout;
    std::fill(tensor.begin(), tensor.end(), kChanged);  // the caller has its tensor back
    int changed = 1;
    MPI_Send(&changed, 1, MPI_INT, 1, kChangedTag, MPI_COMM_WORLD);
  } else if (me == 1) {
    int changed = 0;
    MPI_Recv(&changed, 1, MPI_INT, 0, kChangedTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const P2POp op{P2POp::Kind::Recv, tensor.data(), 32, DataType::F32, 0, 0, &box, shape};
    const Status received = backend->groupedP2P({&op, 1});
    const bool changedData = std::count(tensor.begin(), tensor.end(), kChanged) > 0;
    EXPECT_FALSE(received.isOk() && changedData)
        << "the late reader returned the sender's changed tensor as the box: " << received.toString();
    EXPECT_TRUE(received.isOk() || received.message().find("withdrew the box") != std::string::npos)
        << received.toString();
    ok = !(received.isOk() && changedData);
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

}  // namespace
}  // namespace chimera::testing
