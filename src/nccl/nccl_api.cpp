// SPDX-License-Identifier: Apache-2.0
// Run-time lookup of NCCL entry points (see nccl_api.hpp).
#include "nccl/nccl_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

namespace chimera::detail {
namespace {

struct Resolved {
  Status status;
  NcclApi api;
};

// The handle of the library that defines ncclGetVersion (linked, so loaded): dladdr names
// its file, dlopen(RTLD_NOLOAD) returns the loaded copy. Works for a static NCCL too (the
// executable) and when libchimera itself was dlopen'ed with RTLD_LOCAL (Python).
void* loadedNccl() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) return nullptr;
  return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

template <typename Function>
void lookUp(void* library, const char* name, Function& out) {
  out = reinterpret_cast<Function>(dlsym(library, name));
}

Resolved resolve() {
  Resolved r;
  int code = 0;
  if (const ncclResult_t result = ncclGetVersion(&code); result != ncclSuccess) {
    r.status = Status::backendError(fmt::format("ncclGetVersion failed: {}", ncclGetErrorString(result)));
    return r;
  }
  r.status = ncclFeaturesFor(code, r.api.features);
  if (!r.status.isOk()) return r;
  void* library = loadedNccl();
  if (library == nullptr) {
    r.status = Status::backendError(fmt::format("cannot find the loaded NCCL library: {}", dlerror()));
    return r;
  }
  lookUp(library, "ncclCommInitRankConfig", r.api.commInitRankConfig);
  lookUp(library, "ncclCommSplit", r.api.commSplit);
  lookUp(library, "ncclCommFinalize", r.api.commFinalize);
  lookUp(library, "ncclGetLastError", r.api.getLastError);
  if (r.api.features.allToAll) lookUp(library, "ncclAlltoAll", r.api.allToAll);
  if (r.api.commInitRankConfig == nullptr || r.api.commSplit == nullptr || r.api.commFinalize == nullptr) {
    r.status = Status::unsupported(
        fmt::format("NCCL {} lacks ncclCommInitRankConfig, ncclCommSplit or ncclCommFinalize", r.api.features.text));
  }
  r.api.features.allToAll = r.api.allToAll != nullptr;
  return r;
}

const Resolved& resolved() {
  static const Resolved once = resolve();
  return once;
}

}  // namespace

Status ncclApi(const NcclApi*& out) {
  const Resolved& r = resolved();
  out = &r.api;
  return r.status;
}

const char* ncclLastError() {
  const Resolved& r = resolved();
  if (r.api.getLastError == nullptr) return "";
  const char* text = r.api.getLastError(nullptr);
  return text == nullptr ? "" : text;
}

}  // namespace chimera::detail
