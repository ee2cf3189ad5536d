// SPDX-License-Identifier: Apache-2.0
// Implements keyword look-up over the one table of operation kinds.
#include "chimera/op_kind.hpp"

#include <vector>

namespace chimera {

bool findOpKind(std::string_view text, OpUse use, OpKind& out) {
  for (const OpKindInfo& info : kOpKinds) {
    if ((info.uses & use) != 0 && info.keyword == text) {
      out = info.kind;
      return true;
    }
  }
  return false;
}

std::string opKindKeywords(OpUse use) {
  std::vector<std::string_view> keywords;
  for (const OpKindInfo& info : kOpKinds) {
    if ((info.uses & use) != 0) keywords.push_back(info.keyword);
  }
  std::string list;
  for (std::size_t i = 0; i < keywords.size(); ++i) {
    if (i > 0) list += i + 1 == keywords.size() ? " or " : ", ";
    list += keywords[i];
  }
  return list;
}

}  // namespace chimera
