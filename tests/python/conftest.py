# SPDX-License-Identifier: Apache-2.0
# pytest configuration of the Python suites. Tests marked `mpi` run under mpirun (4 and 8 ranks,
# see CMakeLists.txt): every rank runs the same tests in the same order, as SPMD code does.
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "mpi: collective test, run under mpirun on every rank")


@pytest.fixture(scope="session")
def world():
    """(rank, size) of the MPI world."""
    import chimera

    return chimera.world()
