// SPDX-License-Identifier: Apache-2.0
// What chimera adds to nlohmann::json (common/json.hpp) and how its users report bad files:
// parse errors as Status with the position, duplicate keys and out-of-range numbers rejected,
// doubles written in the shortest round-trip form, and model/profile files whose errors name
// the file, the key and the problem.
#include "common/json.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>

#include "chimera/planning/topology.hpp"
#include "chimera/planning/training_model.hpp"

namespace chimera::detail {
namespace {

std::string parseError(std::string_view text) {
  Json out = "untouched";
  const Status status = parseJson(text, out);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << "accepted: " << text;
  EXPECT_EQ(out, Json("untouched")) << "output changed on error for: " << text;
  return status.message();
}

TEST(Json, ParseKeepsKindsAndInsertionOrder) {
  Json out;
  ASSERT_TRUE(parseJson(R"({"b": 1, "a": {"c": [2.5, null, "x"]}, "n": -9223372036854775808})", out).isOk());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out.begin().key(), "b");
  EXPECT_EQ(intValue(out["b"]), 1);
  EXPECT_EQ(intValue(out["n"]), std::numeric_limits<std::int64_t>::min());
  EXPECT_TRUE(out["a"]["c"][0].is_number_float());
  EXPECT_EQ(intValue(out["a"]["c"][0]), std::nullopt);  // a double is never an integer field
  ASSERT_NE(findMember(out, "a"), nullptr);
  EXPECT_EQ(findMember(out, "missing"), nullptr);
  EXPECT_EQ(findMember(Json(3), "a"), nullptr);
  ASSERT_TRUE(parseJson("18446744073709551615", out).isOk());
  EXPECT_EQ(intValue(out), std::nullopt);  // above int64
}

TEST(Json, MalformedInputNamesProblemAndPosition) {
  const std::string missingColon = parseError("{\n  \"a\" \"b\"\n}");
  EXPECT_NE(missingColon.find("line 2, column 9"), std::string::npos) << missingColon;
  EXPECT_NE(missingColon.find("expected ':'"), std::string::npos) << missingColon;
  EXPECT_NE(parseError("").find("unexpected end of input"), std::string::npos);
  EXPECT_NE(parseError("[1, 2").find("unexpected end of input"), std::string::npos);
  EXPECT_NE(parseError("{\"a\":1,}").find("expected string literal"), std::string::npos);
  EXPECT_NE(parseError("012").find("expected end of input"), std::string::npos);
  EXPECT_NE(parseError("{} x").find("expected end of input"), std::string::npos);
  EXPECT_NE(parseError(R"({"a":1,"b":{"a":2,"a":3}})").find("duplicate object key \"a\""), std::string::npos);
  EXPECT_NE(parseError("[1e999]").find("number overflow"), std::string::npos);
  Json out;
  EXPECT_TRUE(parseJson(R"([{"a":1},{"a":2}])", out).isOk());  // the same key in two objects is fine
}

TEST(Json, DumpIndentsAndWritesDoublesShortestWithAFraction) {
  const Json value = Json::object({{"a", Json::array({1, Json::object()})}, {"b", Json::array()}, {"k\"\n", "q\x01"}});
  EXPECT_EQ(dumpJson(value), "{\"a\":[1,{}],\"b\":[],\"k\\\"\\n\":\"q\\u0001\"}");
  EXPECT_EQ(dumpJson(value, 2), "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": [],\n  \"k\\\"\\n\": \"q\\u0001\"\n}");
  EXPECT_EQ(dumpJson(3.0), "3.0");
  EXPECT_EQ(dumpJson(2e15), "2000000000000000.0");  // nlohmann's own writer says 2e+15
  EXPECT_EQ(dumpJson(1e16), "1e+16");
  EXPECT_EQ(dumpJson(1.2345e-05), "1.2345e-05");
  EXPECT_EQ(dumpJson(std::nan("")), "null");
  EXPECT_EQ(dumpJson(-std::numeric_limits<double>::infinity()), "null");
  for (double x : {0.1, 1.0 / 3.0, 6.02214076e23, -2.5e-300, 1e21, -0.0, 5e-324, 1979e12}) {
    Json parsed;
    ASSERT_TRUE(parseJson(dumpJson(x), parsed).isOk()) << dumpJson(x);
    EXPECT_TRUE(parsed.is_number_float()) << dumpJson(x);
    EXPECT_EQ(parsed.get<double>(), x) << dumpJson(x);
  }
}

// A file under the test's temporary directory, removed at scope exit.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_(std::string(::testing::TempDir()) + "chimera_json_" + std::to_string(::getpid()) + "_" + name) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JsonFiles, ModelFileErrorsNameTheFileTheKeyAndTheProblem) {
  const std::string head = R"({"format": "chimera-model-1", "name": "m", "layers": 4, "hidden": 512, "heads": 8, )";
  const auto expectError = [&](const std::string& name, const std::string& text, const std::string& fragment) {
    const TempFile file(name, text);
    ModelConfig model;
    const Status status = loadModelConfig(file.path(), model);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << text;
    EXPECT_NE(status.message().find("model file '" + file.path() + "'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  };
  expectError("negative.json", head + R"("seq_length": -4})",
              "field 'seq_length' must be a non-negative integer, got -4");
  expectError("fraction.json", head + R"("seq_length": 256.5})", "field 'seq_length' must be a non-negative integer");
  expectError("missing.json", R"({"format": "chimera-model-1", "name": "m"})", "missing field 'layers'");
  expectError("dtype.json", head + R"("seq_length": 256, "dtype": 16})", "field 'dtype' must be a string");
  expectError("duplicate.json", head + R"("seq_length": 256, "layers": 8})", "duplicate object key \"layers\"");
  expectError("syntax.json", head + "\n  \"seq_length\" 256}", "line 2, column");
}

TEST(JsonFiles, ProfileFileErrorsNameTheFileTheKeyAndTheProblem) {
  Topology base;
  ASSERT_TRUE(loadTopology("pcie-4080x8", base).isOk());
  std::string text = topologyToJson(base);
  const std::string from = "\"compute_slots\": ";
  const std::size_t value = text.find(from) + from.size();
  text.replace(value, text.find(',', value) - value, "true");
  const TempFile file("profile.json", text);
  Topology loaded;
  const Status status = loadTopology(file.path(), loaded);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("profile '" + file.path() + "'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("field 'compute_slots' must be an integer, got true"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace chimera::detail
