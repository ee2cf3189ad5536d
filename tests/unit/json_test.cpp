// SPDX-License-Identifier: Apache-2.0
#include "common/json.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace chimera::detail {
namespace {

Json parseOk(std::string_view text) {
  Json out;
  const Status status = parseJson(text, out);
  EXPECT_TRUE(status.isOk()) << status.toString() << " for: " << text;
  return out;
}

std::string parseError(std::string_view text) {
  Json out("untouched");
  const Status status = parseJson(text, out);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << "accepted: " << text;
  EXPECT_EQ(out, Json("untouched")) << "output changed on error for: " << text;
  return status.message();
}

TEST(Json, ScalarsParseToTheRightKind) {
  EXPECT_TRUE(parseOk("null").isNull());
  EXPECT_EQ(parseOk("true").asBool(), true);
  EXPECT_EQ(parseOk(" false ").asBool(), false);
  EXPECT_EQ(parseOk("-42").asInt(), -42);
  EXPECT_EQ(parseOk("9223372036854775807").asInt(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parseOk("-9223372036854775808").asInt(), std::numeric_limits<std::int64_t>::min());
  const Json big = parseOk("9223372036854775808");  // one past int64: becomes a double
  EXPECT_EQ(big.kind(), Json::Kind::Double);
  EXPECT_DOUBLE_EQ(big.asDouble(), 9223372036854775808.0);
  EXPECT_EQ(parseOk("2.5").kind(), Json::Kind::Double);
  EXPECT_DOUBLE_EQ(parseOk("2.5").asDouble(), 2.5);
  EXPECT_DOUBLE_EQ(parseOk("-1.25e-3").asDouble(), -1.25e-3);
  EXPECT_DOUBLE_EQ(parseOk("1E2").asDouble(), 100.0);
  EXPECT_EQ(parseOk("1E2").kind(), Json::Kind::Double);
  EXPECT_EQ(parseOk("\"hi\"").asString(), "hi");
}

TEST(Json, StringEscapesDecodeIncludingSurrogatePairs) {
  EXPECT_EQ(parseOk(R"("a\"b\\c\/d\b\f\n\r\t")").asString(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parseOk(R"("\u0041\u00e9\u20ac")").asString(), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(parseOk(R"("\ud83d\ude00")").asString(), "\xf0\x9f\x98\x80");  // U+1F600
  EXPECT_EQ(parseOk("\"\xc3\xa9\"").asString(), "\xc3\xa9");                 // raw UTF-8 passes through
}

TEST(Json, ObjectsKeepInsertionOrderAndSetReplacesInPlace) {
  Json obj = Json::object();
  obj.set("zeta", 1).set("alpha", "two").set("mid", Json::array().push(1).push(2.5).push(nullptr));
  EXPECT_EQ(obj.dump(), R"({"zeta":1,"alpha":"two","mid":[1,2.5,null]})");
  obj.set("zeta", false);
  EXPECT_EQ(obj.dump(), R"({"zeta":false,"alpha":"two","mid":[1,2.5,null]})");
  EXPECT_EQ(obj.size(), 3u);
  ASSERT_NE(obj.find("alpha"), nullptr);
  EXPECT_EQ(obj.find("alpha")->asString(), "two");
  EXPECT_EQ(obj.find("missing"), nullptr);
  EXPECT_EQ(Json(3).find("x"), nullptr);

  const Json parsed = parseOk(R"({"b": 1, "a": {"c": []}})");
  ASSERT_EQ(parsed.members().size(), 2u);
  EXPECT_EQ(parsed.members()[0].first, "b");
  EXPECT_EQ(parsed.members()[1].first, "a");
}

TEST(Json, DumpEscapesStringsAndKeys) {
  const Json value = Json::object().set("k\"ey\n", std::string("q\"\\\t\x01\x1f end"));
  EXPECT_EQ(value.dump(), "{\"k\\\"ey\\n\":\"q\\\"\\\\\\t\\u0001\\u001f end\"}");
  // Whatever we write must read back to the same value.
  EXPECT_EQ(parseOk(value.dump()), value);
}

TEST(Json, DumpIndentsNestedValues) {
  const Json value = Json::object().set("a", Json::array().push(1).push(Json::object())).set("b", Json::array());
  EXPECT_EQ(value.dump(2), "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(value.dump(0), "{\n\"a\": [\n1,\n{}\n],\n\"b\": []\n}");
  EXPECT_EQ(parseOk(value.dump(2)), value);
}

TEST(Json, DoublesRoundTripExactlyAndKeepTheirKind) {
  for (double x : {0.1, 1.0 / 3.0, 6.02214076e23, -2.5e-300, 1e21, 3.0, -0.0, 5e-324}) {
    const Json parsed = parseOk(Json(x).dump());
    EXPECT_EQ(parsed.kind(), Json::Kind::Double) << Json(x).dump();
    EXPECT_EQ(parsed.asDouble(), x) << Json(x).dump();
  }
  EXPECT_EQ(Json(3.0).dump(), "3.0");
  EXPECT_EQ(Json(std::nan("")).dump(), "null");
  EXPECT_EQ(Json(std::numeric_limits<double>::infinity()).dump(), "null");
  EXPECT_EQ(Json(std::uint64_t{18446744073709551615ull}).kind(), Json::Kind::Double);
  EXPECT_EQ(Json(std::uint64_t{7}).asInt(), 7);
}

TEST(Json, EqualityComparesNumbersByValue) {
  EXPECT_EQ(Json(2), Json(2.0));
  EXPECT_NE(Json(2), Json(2.5));
  EXPECT_NE(Json("2"), Json(2));
  EXPECT_NE(Json::array(), Json::object());
  EXPECT_EQ(parseOk("[1, {\"a\": null}]"), Json::array().push(1).push(Json::object().set("a", nullptr)));
}

TEST(Json, MalformedInputNamesProblemAndPosition) {
  EXPECT_NE(parseError("").find("end of input"), std::string::npos);
  const std::string missingColon = parseError("{\n  \"a\" 1\n}");
  EXPECT_NE(missingColon.find("line 2, column 7"), std::string::npos) << missingColon;
  EXPECT_NE(missingColon.find("expected ':'"), std::string::npos) << missingColon;
  EXPECT_NE(parseError("[1, 2").find("unterminated array"), std::string::npos);
  EXPECT_NE(parseError("[1 2]").find("expected ',' or ']'"), std::string::npos);
  EXPECT_NE(parseError("{\"a\":1,}").find("expected a string key"), std::string::npos);
  EXPECT_NE(parseError("[1,]").find("unexpected character ']'"), std::string::npos);
  EXPECT_NE(parseError("\"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(parseError("\"a\x01\"").find("control character"), std::string::npos);
  EXPECT_NE(parseError(R"("\x")").find("invalid escape"), std::string::npos);
  EXPECT_NE(parseError(R"("\u12G4")").find("hex digit"), std::string::npos);
  EXPECT_NE(parseError(R"("\ud800x")").find("surrogate"), std::string::npos);
  EXPECT_NE(parseError(R"("\udc00")").find("surrogate"), std::string::npos);
  EXPECT_NE(parseError("012").find("leading zero"), std::string::npos);
  EXPECT_NE(parseError("1.").find("after '.'"), std::string::npos);
  EXPECT_NE(parseError("1e").find("exponent"), std::string::npos);
  EXPECT_NE(parseError("-").find("digit"), std::string::npos);
  EXPECT_NE(parseError("1e999").find("out of double range"), std::string::npos);
  EXPECT_NE(parseError("tru").find("unexpected character 't'"), std::string::npos);
  EXPECT_NE(parseError("{} x").find("after the JSON value"), std::string::npos);
  EXPECT_NE(parseError(R"({"a":1,"a":2})").find("duplicate object key \"a\""), std::string::npos);
  EXPECT_NE(parseError(std::string(600, '[') + std::string(600, ']')).find("nesting deeper"), std::string::npos);
}

}  // namespace
}  // namespace chimera::detail
