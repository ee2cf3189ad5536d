// SPDX-License-Identifier: Apache-2.0
// The --json file of one sweep, shared by the collective and scenario modes.
#pragma once

#include <fstream>
#include <string>

#include "chimera/status.hpp"
#include "common/json.hpp"

namespace chimera::bench {

/// Opened before the first row so a bad path fails before any timing, written by rank 0
/// after the last row. Both calls are collective over the world (every rank returns the
/// same status).
class JsonReportFile {
 public:
  /// Opens `path` on rank 0; an empty path means no file. InvalidArgument when it cannot be written.
  [[nodiscard]] Status open(const std::string& path, int rank);
  /// Writes `document` (indented) if a file was opened. InvalidArgument when writing fails.
  [[nodiscard]] Status write(const detail::Json& document);

 private:
  std::ofstream file_;
  std::string path_;
};

}  // namespace chimera::bench
