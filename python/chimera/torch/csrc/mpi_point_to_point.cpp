// SPDX-License-Identifier: Apache-2.0
// MpiPointToPoint and MpiTransfer (see mpi_point_to_point.hpp).
#include "mpi_point_to_point.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <utility>

#include "core/check.hpp"
#include "job/job_end.hpp"
#include "mpi/abandoned_memory.hpp"
#include "mpi/bounded_wait.hpp"

namespace chimera::torch_ext {
namespace {

Status mpiError(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::backendError(fmt::format("{} failed: {}", what, std::string(text, static_cast<std::size_t>(length))));
}

// Cancels a receive and lets it settle for detail::kSettleWindowMs: a cancelled receive completes
// at once, one already matched when its data is in. Whether it settled; when it did not, MPI may
// still write into its buffer, which the caller (a torch tensor) may free or reuse.
bool cancelReceive(MPI_Request& request) {
  MPI_Cancel(&request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(detail::kSettleWindowMs);
  while (request != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    if (done != 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return request == MPI_REQUEST_NULL;
}

}  // namespace

struct MpiPointToPoint::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  int tagUpperBound = 32767;
  std::int64_t timeoutMs = 0;
};

struct MpiTransfer::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  int rank = 0;  // this rank in the group, for the job's end
  bool isSend = false;
  int peer = 0;  // -1: any source
  int tag = 0;
  std::size_t bytes = 0;
  int source = -1;
  bool done = false;
  std::int64_t timeoutMs = 0;
};

MpiTransfer::MpiTransfer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiTransfer::~MpiTransfer() {
  if (impl_ == nullptr || impl_->done || impl_->request == MPI_REQUEST_NULL) return;
  if (!impl_->isSend) {
    if (!cancelReceive(impl_->request)) endWithBufferLent("an unfinished receive was dropped");
    return;
  }
  (void)wait(impl_->timeoutMs);
}

void MpiTransfer::endWithBufferLent(const std::string& why) const {
  const std::string peer = impl_->peer < 0 ? std::string("any rank") : fmt::format("rank {}", impl_->peer);
  detail::endJob("torch", impl_->rank,
                 Status::timeout(fmt::format(
                     "{}: the receive of {} bytes (tag {}) from {} was already matched and did not finish within {} "
                     "ms of its cancellation, so MPI may still write into a tensor torch has back",
                     why, impl_->bytes, impl_->tag, peer, detail::kSettleWindowMs)),
                 std::chrono::milliseconds(impl_->timeoutMs));
}

Status MpiTransfer::test(bool& done) {
  if (!impl_->done) {
    int flag = 0;
    MPI_Status status;
    CHIMERA_RETURN_IF_ERROR(
        mpiError(MPI_Test(&impl_->request, &flag, &status), impl_->isSend ? "MPI_Isend" : "MPI_Irecv"));
    if (flag != 0) {
      impl_->done = true;
      if (!impl_->isSend) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        impl_->source = status.MPI_SOURCE;
        if (static_cast<std::size_t>(count) != impl_->bytes)
          return Status::backendError(fmt::format("recv: expected {} bytes from rank {}, the message had {}",
                                                  impl_->bytes, status.MPI_SOURCE, count));
      }
    }
  }
  done = impl_->done;
  return Status::ok();
}

Status MpiTransfer::wait(std::int64_t timeoutMs) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    bool done = false;
    CHIMERA_RETURN_IF_ERROR(test(done));
    if (done) return Status::ok();
    if (Clock::now() >= deadline) break;
    // Spin briefly, then back off to at most 1 ms: an oversubscribed host needs the core.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  const std::string peer = impl_->peer < 0 ? std::string("any rank") : fmt::format("rank {}", impl_->peer);
  if (!impl_->isSend) {
    if (!cancelReceive(impl_->request)) endWithBufferLent(fmt::format("a receive timed out after {} ms", timeoutMs));
  } else {
    MPI_Request_free(&impl_->request);
  }
  impl_->request = MPI_REQUEST_NULL;
  impl_->done = true;
  return Status::timeout(fmt::format("{} of {} bytes (tag {}) {} {} did not complete within {} ms",
                                     impl_->isSend ? "send" : "recv", impl_->bytes, impl_->tag,
                                     impl_->isSend ? "to" : "from", peer, timeoutMs));
}

int MpiTransfer::source() const { return impl_->isSend || impl_->source < 0 ? impl_->peer : impl_->source; }

Status MpiPointToPoint::create(const void* comm, std::int64_t timeoutMs, std::unique_ptr<MpiPointToPoint>& out) {
  CHIMERA_CHECK_ARG(comm != nullptr && timeoutMs > 0, "point-to-point channel: null communicator or timeout {} ms",
                    timeoutMs);
  auto impl = std::make_unique<Impl>();
  {
    // Bounded like every wait: a member that never creates its channel is a Timeout, not a hang.
    // MPI writes the handle when the duplication completes, which a late member may make happen
    // after the Timeout: the handle's memory is then kept until the process exits.
    auto handle = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    MPI_Request request = MPI_REQUEST_NULL;
    CHIMERA_RETURN_IF_ERROR(
        mpiError(MPI_Comm_idup(*static_cast<const MPI_Comm*>(comm), handle.get(), &request), "MPI_Comm_idup"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int done = 0;
      CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Comm_idup"));
      if (done != 0) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        detail::keepUntilExit(handle);
        return Status::timeout(fmt::format(
            "creating the point-to-point channel (MPI_Comm_idup) made no progress for {} ms: a member of the group "
            "did not create it",
            timeoutMs));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    impl->comm = *handle;
  }
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  if (found != 0 && value != nullptr) impl->tagUpperBound = *static_cast<int*>(value);
  impl->timeoutMs = timeoutMs;
  out = std::make_unique<MpiPointToPoint>(std::move(impl));
  return Status::ok();
}

MpiPointToPoint::MpiPointToPoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiPointToPoint::~MpiPointToPoint() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0 && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

int MpiPointToPoint::userTagLimit() const { return impl_->tagUpperBound; }
int MpiPointToPoint::barrierTag() const { return impl_->tagUpperBound; }
int MpiPointToPoint::rank() const { return impl_->rank; }
int MpiPointToPoint::size() const { return impl_->size; }
std::int64_t MpiPointToPoint::timeoutMs() const { return impl_->timeoutMs; }

namespace {

Status post(MPI_Comm comm, bool isSend, void* buffer, std::size_t bytes, int peer, int tag, int size, int tagLimit,
            std::int64_t timeoutMs, std::unique_ptr<MpiTransfer>& out) {
  const char* what = isSend ? "send" : "recv";
  CHIMERA_CHECK_ARG((peer >= 0 || (!isSend && peer == -1)) && peer < size,
                    "{}: peer {} is not a rank of this group of {}", what, peer, size);
  CHIMERA_CHECK_ARG(tag >= 0 && tag <= tagLimit, "{}: tag {} outside [0, {}]", what, tag, tagLimit);
  CHIMERA_CHECK_ARG(bytes <= static_cast<std::size_t>(INT_MAX), "{}: {} bytes exceed one MPI message", what, bytes);
  auto impl = std::make_unique<MpiTransfer::Impl>();
  impl->isSend = isSend;
  impl->peer = peer;
  impl->tag = tag;
  impl->bytes = bytes;
  impl->timeoutMs = timeoutMs;
  MPI_Comm_rank(comm, &impl->rank);
  const int count = static_cast<int>(bytes);
  if (isSend) {
    CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Isend(buffer, count, MPI_BYTE, peer, tag, comm, &impl->request), "MPI_Isend"));
  } else {
    CHIMERA_RETURN_IF_ERROR(mpiError(
        MPI_Irecv(buffer, count, MPI_BYTE, peer < 0 ? MPI_ANY_SOURCE : peer, tag, comm, &impl->request), "MPI_Irecv"));
  }
  out = std::make_unique<MpiTransfer>(std::move(impl));
  return Status::ok();
}

}  // namespace

Status MpiPointToPoint::send(const void* buffer, std::size_t bytes, int peer, int tag,
                             std::unique_ptr<MpiTransfer>& out) {
  return post(impl_->comm, true, const_cast<void*>(buffer), bytes, peer, tag, impl_->size, impl_->tagUpperBound,
              impl_->timeoutMs, out);
}

Status MpiPointToPoint::recv(void* buffer, std::size_t bytes, int peer, int tag, std::unique_ptr<MpiTransfer>& out) {
  return post(impl_->comm, false, buffer, bytes, peer, tag, impl_->size, impl_->tagUpperBound, impl_->timeoutMs, out);
}

}  // namespace chimera::torch_ext
