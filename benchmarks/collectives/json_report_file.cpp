// SPDX-License-Identifier: Apache-2.0
// Implements the --json file that the collective and scenario modes write.
#include "json_report_file.hpp"

#include "bench_context.hpp"

namespace chimera::bench {

Status JsonReportFile::open(const std::string& path, int rank) {
  path_ = path;
  if (rank == 0 && !path.empty()) file_.open(path, std::ios::trunc);
  const bool failed = rank == 0 && !path.empty() && !file_;
  return agreeOnStatus(failed ? Status::invalidArgument("--json: cannot write '" + path + "'") : Status::ok());
}

Status JsonReportFile::write(const detail::Json& document) {
  bool failed = false;
  if (file_.is_open()) {
    file_ << detail::dumpJson(document, 2) << '\n';
    failed = !file_.flush();
  }
  return agreeOnStatus(failed ? Status::invalidArgument("--json: writing '" + path_ + "' failed") : Status::ok());
}

}  // namespace chimera::bench
