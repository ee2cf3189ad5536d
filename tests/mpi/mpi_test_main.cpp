// SPDX-License-Identifier: Apache-2.0
// main() of the MPI test binaries: MPI_Init, GoogleTest with the full report on rank 0 and
// only failures (tagged with the rank) elsewhere, MPI_Finalize. The exit code is non-zero
// on every rank when any rank failed, so mpiexec reports the failure.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// Prints failed assertions of a non-zero rank, which the rank-0 report would not show.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int localFailed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int anyFailed = 0;
  MPI_Allreduce(&localFailed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return anyFailed;
}
