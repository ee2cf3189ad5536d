// SPDX-License-Identifier: Apache-2.0
// The registry of live native objects; see resources.hpp.
#include "resources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "errors.hpp"

namespace chimera::python {
namespace {

std::vector<Resource*>& registry() {
  static std::vector<Resource*> live;
  return live;
}

}  // namespace

Resource::Resource(PyBackend* owner) : owner_(owner) { registry().push_back(this); }

Resource::~Resource() {
  auto& live = registry();
  live.erase(std::remove(live.begin(), live.end(), this), live.end());
}

void closeAllResources() {
  const std::vector<Resource*> live = registry();
  for (auto it = live.rbegin(); it != live.rend(); ++it) (*it)->close();
}

void closeDependents(const PyBackend* backend) {
  const std::vector<Resource*> live = registry();
  for (auto it = live.rbegin(); it != live.rend(); ++it) {
    if ((*it)->owner() == backend) (*it)->close();
  }
}

PyBackend::PyBackend(std::unique_ptr<Backend> backend)
    : Resource(nullptr),
      backend_(std::move(backend)),
      space_(backend_->name() == "nccl" ? MemorySpace::Device : MemorySpace::Host) {}

PyBackend::~PyBackend() { PyBackend::close(); }

void PyBackend::close() {
  if (backend_ == nullptr) return;
  closeDependents(this);
  backend_.reset();
}

Backend& PyBackend::get(const char* call) const {
  if (backend_ == nullptr) raiseStatus(Status::invalidArgument(fmt::format("{}: the backend is closed", call)));
  return *backend_;
}

}  // namespace chimera::python
