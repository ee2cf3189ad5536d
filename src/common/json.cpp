// SPDX-License-Identifier: Apache-2.0
#include "common/json.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "core/check.hpp"

namespace chimera::detail {

Json::Json(std::uint64_t value) {
  if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    value_ = static_cast<std::int64_t>(value);
  } else {
    value_ = static_cast<double>(value);
  }
}

bool Json::asBool() const {
  CHIMERA_ASSERT(isBool());
  return std::get<bool>(value_);
}

std::int64_t Json::asInt() const {
  CHIMERA_ASSERT(isInt());
  return std::get<std::int64_t>(value_);
}

double Json::asDouble() const {
  CHIMERA_ASSERT(isNumber());
  if (isInt()) return static_cast<double>(std::get<std::int64_t>(value_));
  return std::get<double>(value_);
}

const std::string& Json::asString() const {
  CHIMERA_ASSERT(isString());
  return std::get<std::string>(value_);
}

const Json::Array& Json::items() const {
  CHIMERA_ASSERT(isArray());
  return std::get<Array>(value_);
}

const Json::Object& Json::members() const {
  CHIMERA_ASSERT(isObject());
  return std::get<Object>(value_);
}

std::size_t Json::size() const {
  if (isArray()) return items().size();
  if (isObject()) return members().size();
  return 0;
}

const Json* Json::find(std::string_view key) const {
  if (!isObject()) return nullptr;
  for (const auto& [name, value] : members()) {
    if (name == key) return &value;
  }
  return nullptr;
}

Json& Json::set(std::string_view key, Json value) {
  CHIMERA_ASSERT(isObject());
  auto& object = std::get<Object>(value_);
  for (auto& [name, existing] : object) {
    if (name == key) {
      existing = std::move(value);
      return *this;
    }
  }
  object.emplace_back(std::string(key), std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  CHIMERA_ASSERT(isArray());
  std::get<Array>(value_).push_back(std::move(value));
  return *this;
}

bool operator==(const Json& a, const Json& b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.isInt() && b.isInt()) return a.asInt() == b.asInt();
    return a.asDouble() == b.asDouble();
  }
  return a.value_ == b.value_;
}

namespace {

void appendEscaped(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void appendDouble(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  // fmt's "{}" is the shortest text that reads back to the same double; make sure it still
  // reads as a number with a fraction or exponent so the kind survives a round trip.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  out += text;
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out.push_back('\n');
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
}

}  // namespace

void Json::dumpTo(std::string& out, int indent, int depth) const {
  switch (kind()) {
    case Kind::Null: out += "null"; return;
    case Kind::Bool: out += asBool() ? "true" : "false"; return;
    case Kind::Int: out += fmt::format("{}", asInt()); return;
    case Kind::Double: appendDouble(out, std::get<double>(value_)); return;
    case Kind::String: appendEscaped(out, asString()); return;
    case Kind::Array: {
      if (items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (std::size_t i = 0; i < items().size(); ++i) {
        if (i > 0) out.push_back(',');
        newline(out, indent, depth + 1);
        items()[i].dumpTo(out, indent, depth + 1);
      }
      newline(out, indent, depth);
      out.push_back(']');
      return;
    }
    case Kind::Object: {
      if (members().empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      for (std::size_t i = 0; i < members().size(); ++i) {
        if (i > 0) out.push_back(',');
        newline(out, indent, depth + 1);
        appendEscaped(out, members()[i].first);
        out += indent < 0 ? ":" : ": ";
        members()[i].second.dumpTo(out, indent, depth + 1);
      }
      newline(out, indent, depth);
      out.push_back('}');
      return;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dumpTo(out, indent, 0);
  return out;
}

namespace {

constexpr int kMaxDepth = 512;

// Recursive-descent parser over the whole text; every error names the position.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Status document(Json& out) {
    skipSpace();
    CHIMERA_RETURN_IF_ERROR(value(out, 0));
    skipSpace();
    if (pos_ != text_.size()) return error("unexpected text after the JSON value");
    return Status::ok();
  }

 private:
  Status error(std::string_view what) const {
    std::size_t line = 1;
    std::size_t column = 1;
    for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return Status::invalidArgument(
        fmt::format("JSON parse error at line {}, column {} (offset {}): {}", line, column, pos_, what));
  }

  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }

  void skipSpace() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  bool consumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status value(Json& out, int depth) {
    if (depth > kMaxDepth) return error(fmt::format("nesting deeper than {} levels", kMaxDepth));
    if (atEnd()) return error("expected a value, found end of input");
    const char c = peek();
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      std::string text;
      CHIMERA_RETURN_IF_ERROR(string(text));
      out = Json(std::move(text));
      return Status::ok();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    if (consumeWord("true")) {
      out = Json(true);
      return Status::ok();
    }
    if (consumeWord("false")) {
      out = Json(false);
      return Status::ok();
    }
    if (consumeWord("null")) {
      out = Json();
      return Status::ok();
    }
    return error(fmt::format("unexpected character '{}'", c));
  }

  Status object(Json& out, int depth) {
    ++pos_;  // '{'
    Json result = Json::object();
    skipSpace();
    if (!atEnd() && peek() == '}') {
      ++pos_;
      out = std::move(result);
      return Status::ok();
    }
    while (true) {
      skipSpace();
      if (atEnd() || peek() != '"') return error("expected a string key in object");
      const std::size_t keyPos = pos_;
      std::string key;
      CHIMERA_RETURN_IF_ERROR(string(key));
      if (result.find(key) != nullptr) {
        pos_ = keyPos;
        return error(fmt::format("duplicate object key \"{}\"", key));
      }
      skipSpace();
      if (atEnd() || peek() != ':') return error("expected ':' after object key");
      ++pos_;
      skipSpace();
      Json member;
      CHIMERA_RETURN_IF_ERROR(value(member, depth + 1));
      result.set(key, std::move(member));
      skipSpace();
      if (atEnd()) return error("unterminated object: expected ',' or '}'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        out = std::move(result);
        return Status::ok();
      }
      return error("expected ',' or '}' in object");
    }
  }

  Status array(Json& out, int depth) {
    ++pos_;  // '['
    Json result = Json::array();
    skipSpace();
    if (!atEnd() && peek() == ']') {
      ++pos_;
      out = std::move(result);
      return Status::ok();
    }
    while (true) {
      skipSpace();
      Json element;
      CHIMERA_RETURN_IF_ERROR(value(element, depth + 1));
      result.push(std::move(element));
      skipSpace();
      if (atEnd()) return error("unterminated array: expected ',' or ']'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        out = std::move(result);
        return Status::ok();
      }
      return error("expected ',' or ']' in array");
    }
  }

  Status hex4(unsigned& out) {
    if (text_.size() - pos_ < 4) return error("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + static_cast<std::size_t>(i)];
      unsigned digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<unsigned>(c - 'A' + 10);
      } else {
        return error("invalid hex digit in \\u escape");
      }
      out = out * 16 + digit;
    }
    pos_ += 4;
    return Status::ok();
  }

  static void appendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status unicodeEscape(std::string& out) {
    unsigned cp = 0;
    CHIMERA_RETURN_IF_ERROR(hex4(cp));
    if (cp >= 0xDC00 && cp <= 0xDFFF) return error("unpaired low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (!consumeWord("\\u")) return error("high surrogate not followed by a \\u low surrogate");
      unsigned low = 0;
      CHIMERA_RETURN_IF_ERROR(hex4(low));
      if (low < 0xDC00 || low > 0xDFFF) return error("high surrogate not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    appendUtf8(out, cp);
    return Status::ok();
  }

  Status string(std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (atEnd()) return error("unterminated string");
      const char c = peek();
      if (c == '"') {
        ++pos_;
        return Status::ok();
      }
      if (static_cast<unsigned char>(c) < 0x20) return error("unescaped control character in string");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (atEnd()) return error("unterminated escape in string");
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': CHIMERA_RETURN_IF_ERROR(unicodeEscape(out)); break;
        default: --pos_; return error(fmt::format("invalid escape '\\{}' in string", e));
      }
    }
  }

  bool digits() {
    const std::size_t start = pos_;
    while (!atEnd() && peek() >= '0' && peek() <= '9') ++pos_;
    return pos_ > start;
  }

  // Validates the RFC 8259 number grammar first, then converts with from_chars.
  Status number(Json& out) {
    const std::size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (atEnd() || !(peek() >= '0' && peek() <= '9')) return error("expected a digit in number");
    if (peek() == '0') {
      ++pos_;
      if (!atEnd() && peek() >= '0' && peek() <= '9') return error("leading zero in number");
    } else {
      digits();
    }
    if (!atEnd() && peek() == '.') {
      integral = false;
      ++pos_;
      if (!digits()) return error("expected a digit after '.' in number");
    }
    if (!atEnd() && (peek() == 'e' || peek() == 'E')) {
      integral = false;
      ++pos_;
      if (!atEnd() && (peek() == '+' || peek() == '-')) ++pos_;
      if (!digits()) return error("expected a digit in number exponent");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      std::int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(first, last, value);
      if (ec == std::errc() && ptr == last) {
        out = Json(value);
        return Status::ok();
      }
      // Out of int64 range: fall through to double.
    }
    double value = 0;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec == std::errc::result_out_of_range) {
      pos_ = start;
      return error("number out of double range");
    }
    CHIMERA_ASSERT(ec == std::errc() && ptr == last);
    out = Json(value);
    return Status::ok();
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

Status parseJson(std::string_view text, Json& out) {
  Json result;
  CHIMERA_RETURN_IF_ERROR(Parser(text).document(result));
  out = std::move(result);
  return Status::ok();
}

}  // namespace chimera::detail
