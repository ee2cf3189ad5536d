// SPDX-License-Identifier: Apache-2.0
// Lifetimes of the native objects Python holds. A Backend must outlive the Executors and
// Sessions built on it (they free scratch through it), and MPI must be finalised after every
// communicator is freed, whatever order Python's garbage collector picks. So every wrapper
// registers here: closing a backend closes its dependents first, and `closeAll` (at
// interpreter exit) closes everything in reverse creation order before MPI is finalised.
#pragma once

#include <memory>
#include <string>

#include "chimera/backend.hpp"
#include "tensor_view.hpp"

namespace chimera::python {

class PyBackend;

/// A native object that can be released before its Python wrapper dies.
class Resource {
 public:
  explicit Resource(PyBackend* owner);
  virtual ~Resource();
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;
  /// Releases the native object; later calls on the wrapper raise InvalidArgument.
  virtual void close() = 0;
  /// The backend this object was built on (nullptr for a backend).
  PyBackend* owner() const { return owner_; }

 private:
  PyBackend* owner_;
};

/// Closes every registered resource, newest first (interpreter exit).
void closeAllResources();
/// Closes the resources built on `backend`, newest first.
void closeDependents(const PyBackend* backend);

/// The Python-side Backend: owns the C++ backend until closed.
class PyBackend : public Resource {
 public:
  explicit PyBackend(std::unique_ptr<Backend> backend);
  ~PyBackend() override;
  void close() override;
  /// The backend; InvalidArgument when closed.
  Backend& get(const char* call) const;
  bool closed() const { return backend_ == nullptr; }
  /// Host for MPI, Device for NCCL.
  MemorySpace space() const { return space_; }

 private:
  std::unique_ptr<Backend> backend_;
  MemorySpace space_;
};

}  // namespace chimera::python
