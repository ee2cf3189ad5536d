// SPDX-License-Identifier: Apache-2.0
// A small JSON value (private): enough for tool output (`--json`) and profile files.
// Numbers keep integers exact (int64) and everything else as double; object keys keep
// insertion order so that output reads in the order it was built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::detail {

/// A JSON value: null, bool, integer (int64), number (double), string, array or object.
class Json {
 public:
  /// The kind of value held.
  enum class Kind { Null, Bool, Int, Double, String, Array, Object };
  /// Elements of an array.
  using Array = std::vector<Json>;
  /// Members of an object, in insertion order; keys are unique.
  using Object = std::vector<std::pair<std::string, Json>>;

  /// null.
  Json() = default;
  /// null.
  Json(std::nullptr_t) {}
  /// A bool.
  Json(bool value) : value_(value) {}
  /// An integer.
  Json(int value) : value_(static_cast<std::int64_t>(value)) {}
  /// An integer.
  Json(std::int64_t value) : value_(value) {}
  /// An integer.
  Json(unsigned value) : value_(static_cast<std::int64_t>(value)) {}
  /// An integer; values above INT64_MAX become doubles.
  Json(std::uint64_t value);
  /// A floating-point number; NaN and infinities are written as null.
  Json(double value) : value_(value) {}
  /// A string (UTF-8 bytes, escaped on output).
  Json(std::string value) : value_(std::move(value)) {}
  /// A string.
  Json(std::string_view value) : value_(std::string(value)) {}
  /// A string.
  Json(const char* value) : value_(std::string(value)) {}

  /// An empty array.
  static Json array() { return fromVariant(Array{}); }
  /// An empty object.
  static Json object() { return fromVariant(Object{}); }

  /// The kind of value held.
  Kind kind() const { return static_cast<Kind>(value_.index()); }
  /// True for null.
  bool isNull() const { return kind() == Kind::Null; }
  /// True for a bool.
  bool isBool() const { return kind() == Kind::Bool; }
  /// True for both Int and Double.
  bool isNumber() const { return kind() == Kind::Int || kind() == Kind::Double; }
  /// True for an integer (a number written without fraction or exponent that fits int64).
  bool isInt() const { return kind() == Kind::Int; }
  /// True for a string.
  bool isString() const { return kind() == Kind::String; }
  /// True for an array.
  bool isArray() const { return kind() == Kind::Array; }
  /// True for an object.
  bool isObject() const { return kind() == Kind::Object; }

  /// The bool; the kind must be Bool (a violated precondition aborts: check the kind first).
  bool asBool() const;
  /// The integer; the kind must be Int.
  std::int64_t asInt() const;
  /// The number as a double; the kind must be Int or Double.
  double asDouble() const;
  /// The string; the kind must be String.
  const std::string& asString() const;
  /// The elements; the kind must be Array.
  const Array& items() const;
  /// The members; the kind must be Object.
  const Object& members() const;

  /// Number of elements (array) or members (object); 0 for scalars.
  std::size_t size() const;
  /// The member named `key`, or nullptr when absent or when this is not an object.
  const Json* find(std::string_view key) const;
  /// Sets member `key` (replacing an existing one in place); this must be an object. Returns *this.
  Json& set(std::string_view key, Json value);
  /// Appends an element; this must be an array. Returns *this.
  Json& push(Json value);

  /// Serialises the value. `indent` < 0: one line, no spaces; `indent` >= 0: one member or
  /// element per line, nested levels indented by `indent` spaces. Strings are escaped
  /// (quote, backslash, control characters); doubles are written so that they read back
  /// to the same value.
  std::string dump(int indent = -1) const;

  /// Structural equality: numbers compare by value across Int and Double; objects compare
  /// member by member in insertion order.
  friend bool operator==(const Json& a, const Json& b);

 private:
  using Value = std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, Array, Object>;
  static Json fromVariant(Value value) {
    Json json;
    json.value_ = std::move(value);
    return json;
  }
  void dumpTo(std::string& out, int indent, int depth) const;

  Value value_{nullptr};
};

/// Parses one JSON document (RFC 8259; surrounding whitespace allowed, nothing else after
/// it). On failure returns InvalidArgument naming the problem and where it is
/// ("line 3, column 7 (offset 41): expected ':' after object key"); `out` is then unchanged.
/// Duplicate object keys are rejected; nesting deeper than 512 levels is rejected.
[[nodiscard]] Status parseJson(std::string_view text, Json& out);

}  // namespace chimera::detail
