// SPDX-License-Identifier: Apache-2.0
// chimera-rank-launch: starts N ranks of an NCCL world without MPI. Creates one NCCL unique
// id, forks N processes with CHIMERA_RANK, CHIMERA_WORLD_SIZE, CHIMERA_LOCAL_RANK,
// CHIMERA_LOCAL_WORLD_SIZE and CHIMERA_NCCL_UNIQUE_ID set (what createNcclBackendFromEnv
// reads), and waits for all of them, at most -t seconds: past it every rank is killed and the
// exit status is 124, so a hung rank never hangs the caller. Used by scripts/gpu-check.sh on
// machines without MPI (several ranks may share one GPU where NCCL allows it).
//
// usage: chimera-rank-launch -n N [-t seconds] [-l log-prefix] -- program [args...]
//        chimera-rank-launch --nccl-version
// -l writes rank r's output to <log-prefix>.rank<r>.log instead of the terminal.
// Exit status: 0 when every rank exited 0; 124 on the deadline; else the first failing
// rank's status (128 + signal for a signal); 2 on bad usage.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chimera/nccl_backend.hpp"
#include "common/cli.hpp"
#include "nccl/nccl_bootstrap_env.hpp"

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "chimera-rank-launch: %s\nusage: chimera-rank-launch -n N [-t seconds] [-l log-prefix] -- program "
               "[args...]\n       chimera-rank-launch --nccl-version\n",
               why);
  std::exit(2);
}

int exitStatus(int waitStatus) {
  if (WIFEXITED(waitStatus)) return WEXITSTATUS(waitStatus);
  if (WIFSIGNALED(waitStatus)) return 128 + WTERMSIG(waitStatus);
  return 1;
}

[[noreturn]] void runRank(int rank, int ranks, const std::string& id, const std::string& logPrefix, char** argv) {
  const std::string r = std::to_string(rank);
  const std::string n = std::to_string(ranks);
  setenv("CHIMERA_RANK", r.c_str(), 1);
  setenv("CHIMERA_WORLD_SIZE", n.c_str(), 1);
  setenv("CHIMERA_LOCAL_RANK", r.c_str(), 1);
  setenv("CHIMERA_LOCAL_WORLD_SIZE", n.c_str(), 1);
  setenv("CHIMERA_NCCL_UNIQUE_ID", id.c_str(), 1);
  if (!logPrefix.empty()) {
    const std::string path = logPrefix + ".rank" + r + ".log";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      std::perror(path.c_str());
      _exit(127);
    }
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  execvp(argv[0], argv);
  std::perror(argv[0]);
  _exit(127);
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0;
  int seconds = 300;
  std::string logPrefix;
  bool version = false;
  using chimera::detail::parseIntFlag;
  const chimera::detail::CliFlag flags[] = {
      {"-n", "", true, [&](std::string_view v) { return parseIntFlag("-n", v, 1, ranks); }},
      {"-t", "", true, [&](std::string_view v) { return parseIntFlag("-t", v, 1, seconds); }},
      {"-l", "", true, [&](std::string_view v) { return logPrefix = v, chimera::Status::ok(); }},
      {"", "--nccl-version", false, [&](std::string_view) { return version = true, chimera::Status::ok(); }},
  };
  // The launcher's own arguments end at "--"; the program and its arguments follow.
  int first = 1;
  while (first < argc && std::string_view(argv[first]) != "--") ++first;
  const std::vector<std::string> own(argv + 1, argv + first);
  if (const chimera::Status status = chimera::detail::parseFlags(own, flags); !status.isOk()) {
    usage(status.message().c_str());
  }
  if (version) {
    std::string text;
    int code = 0;
    const chimera::Status status = chimera::ncclLibraryVersion(text, code);
    std::printf("NCCL %s (code %d)%s%s\n", text.c_str(), code, status.isOk() ? "" : ": ",
                status.isOk() ? "" : status.message().c_str());
    return status.isOk() ? 0 : 3;
  }
  if (ranks < 1 || ranks > 1024) usage("-n must be in 1..1024");
  ++first;  // past "--"
  if (first >= argc) usage("no program after --");

  chimera::NcclUniqueId id;
  if (const chimera::Status status = chimera::createNcclUniqueId(id); !status.isOk()) {
    std::fprintf(stderr, "chimera-rank-launch: %s\n", status.toString().c_str());
    return 1;
  }
  const std::string hex = chimera::detail::uniqueIdToHex(id);
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (const pid_t child : children) kill(child, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      setpgid(0, 0);  // its own group: killing it takes whatever it started too
      runRank(rank, ranks, hex, logPrefix, argv + first);
    }
    setpgid(pid, pid);
    children.push_back(pid);
  }

  std::vector<int> status(children.size(), -1);
  std::size_t running = children.size();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (running > 0 && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t r = 0; r < children.size(); ++r) {
      int waitStatus = 0;
      if (status[r] < 0 && waitpid(children[r], &waitStatus, WNOHANG) == children[r]) {
        status[r] = exitStatus(waitStatus);
        --running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (running > 0) {
    std::fprintf(stderr, "chimera-rank-launch: %zu of %d ranks still running after %d s: killing them\n", running,
                 ranks, seconds);
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (status[r] < 0) kill(-children[r], SIGKILL);
    }
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (status[r] < 0) waitpid(children[r], nullptr, 0);
    }
    return 124;
  }
  int result = 0;
  for (std::size_t r = 0; r < children.size(); ++r) {
    if (status[r] != 0) std::fprintf(stderr, "chimera-rank-launch: rank %zu exited with status %d\n", r, status[r]);
    if (status[r] != 0 && result == 0) result = status[r];
  }
  return result;
}
