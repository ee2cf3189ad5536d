// SPDX-License-Identifier: Apache-2.0
// Checking macros (private). Argument checks return a Status naming the problem with its
// values; CHIMERA_ASSERT is for internal invariants and aborts with file:line.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "chimera/status.hpp"

/// Returns InvalidArgument with a formatted message from the enclosing function unless `cond`.
#define CHIMERA_CHECK_ARG(cond, ...)                                                  \
  do {                                                                                \
    if (!(cond)) return ::chimera::Status::invalidArgument(fmt::format(__VA_ARGS__)); \
  } while (0)

/// Evaluates a Status expression and returns it from the enclosing function when it failed.
#define CHIMERA_RETURN_IF_ERROR(expr)                    \
  do {                                                   \
    ::chimera::Status chimera_status_ = (expr);          \
    if (!chimera_status_.isOk()) return chimera_status_; \
  } while (0)

/// Aborts with file:line and the failed condition. For bugs, never for user input.
#define CHIMERA_ASSERT(cond)                                                                                \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      std::fprintf(stderr, "chimera: internal invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                                         \
    }                                                                                                       \
  } while (0)

/// Like CHIMERA_ASSERT for `a == b`, printing both operands.
#define CHIMERA_ASSERT_EQ(a, b)                                                                                      \
  do {                                                                                                               \
    const auto& chimera_a_ = (a);                                                                                    \
    const auto& chimera_b_ = (b);                                                                                    \
    if (!(chimera_a_ == chimera_b_)) {                                                                               \
      std::fprintf(stderr, "chimera: internal invariant failed at %s:%d: %s == %s (%s vs %s)\n", __FILE__, __LINE__, \
                   #a, #b, fmt::format("{}", chimera_a_).c_str(), fmt::format("{}", chimera_b_).c_str());            \
      std::abort();                                                                                                  \
    }                                                                                                                \
  } while (0)
