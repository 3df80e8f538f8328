// safetensors reader/writer and checkpoint folders: round trips, every header rejection of the
// reference reader (each message must name the file and the tensor), sharded folders, lazy mapping.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "qmoe/checkpoint.h"
#include "qmoe/error.h"
#include "qmoe/tensor.h"

namespace qmoe {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// The qmoe::Error message `f` throws; a failure (and "") when it throws nothing.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a qmoe::Error";
  return "";
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file image: length prefix (the header's length unless given), header, data.
std::string image(const std::string& header, const std::string& data,
                  std::optional<uint64_t> length = std::nullopt) {
  return le64(length.value_or(header.size())) + header + data;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

Tensor filled(DType dtype, std::vector<int64_t> shape, uint8_t seed) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < t.size_bytes(); ++i)
    t.raw()[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.size_bytes() == b.size_bytes() &&
         (a.size_bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.size_bytes()) == 0);
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "qmoe_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    std::replace(name.begin(), name.end(), '/', '_');  // parameterised names hold '/'
    dir_ = fs::temp_directory_path() / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A path under the test folder; its parent folders are created.
  std::string path(const std::string& name) const {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    return p.string();
  }

  std::string write_file(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << p;
    return p;
  }

  // Writes `header` + `data` as bad.safetensors and returns the error opening it.
  std::string open_error(const std::string& header, const std::string& data,
                         std::optional<uint64_t> length = std::nullopt) {
    const std::string p = write_file("bad.safetensors", image(header, data, length));
    return error_of([&] { SafetensorsFile f(p); });
  }

  fs::path dir_;
};

// ---- round trips -------------------------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripKeepsDtypesShapesBytesAndMetadata) {
  const Tensor fp8 = filled(DType::kF8E4M3, {3, 5}, 1);
  const Tensor bf16 = filled(DType::kBF16, {2, 3}, 2);
  const Tensor i32 = filled(DType::kI32, {4}, 3);
  const Tensor scalar = filled(DType::kF32, {}, 4);
  const Tensor empty = filled(DType::kU8, {0, 7}, 5);
  const Tensor i64 = filled(DType::kI64, {1, 1, 2}, 6);
  const Tensor f64 = filled(DType::kF64, {2}, 7);
  const Tensor flags = filled(DType::kBool, {3}, 8);
  const Tensor e5m2 = filled(DType::kF8E5M2, {1}, 9);
  const std::vector<std::pair<std::string, const Tensor*>> tensors = {
      {"w.fp8", &fp8}, {"w.bf16", &bf16}, {"idx", &i32},     {"scalar", &scalar}, {"empty", &empty},
      {"i64", &i64},   {"f64", &f64},     {"flags", &flags}, {"e5m2", &e5m2}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo"}};
  const std::string p = path("rt.safetensors");
  write_safetensors(p, tensors, meta);

  const auto back = read_safetensors(p);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const auto it = back.find(name);
    ASSERT_NE(it, back.end());
    EXPECT_EQ(it->second.dtype(), t->dtype());
    EXPECT_EQ(it->second.shape(), t->shape());
    EXPECT_TRUE(same_bytes(it->second, *t));
  }
  EXPECT_EQ(back.at("scalar").rank(), 0);
  EXPECT_EQ(back.at("scalar").size_bytes(), 4u);
  EXPECT_EQ(back.at("empty").size_bytes(), 0u);

  const SafetensorsFile f(p);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_NE(f.find("w.bf16"), nullptr);
  EXPECT_EQ(f.find("w.bf16")->dtype, DType::kBF16);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST_F(SafetensorsTest, WriterKeepsOrderPadsHeaderAndPutsMetadataFirst) {
  const Tensor b = filled(DType::kF16, {3}, 1);
  const Tensor a = filled(DType::kU8, {1}, 2);
  const std::string p = path("order.safetensors");
  write_safetensors(p, {{"zeta", &b}, {"alpha", &a}}, {{"format", "pt"}});

  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t{static_cast<uint8_t>(bytes[static_cast<size_t>(i)])} << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 7);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_LT(header.find("__metadata__"), header.find("zeta"));
  EXPECT_LT(header.find("zeta"), header.find("alpha"));
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));

  // Offsets follow the given order.
  const SafetensorsFile f(p);
  EXPECT_EQ(f.find("zeta")->begin, 0u);
  EXPECT_EQ(f.find("zeta")->end, 6u);
  EXPECT_EQ(f.find("alpha")->begin, 6u);
  EXPECT_EQ(f.find("alpha")->end, 7u);
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateAndReservedNames) {
  const Tensor t = filled(DType::kU8, {1}, 1);
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path("d.safetensors"), {{"x", &t}, {"x", &t}});
                       }),
                       "'x'"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path("d.safetensors"), {{"__metadata__", &t}});
                       }),
                       "__metadata__"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path("d.safetensors"), {{"n", nullptr}});
                       }),
                       "'n'"));
}

TEST_F(SafetensorsTest, ReadsAFileLaidOutLikeThePythonWriter) {
  // Compact JSON, sorted by dtype then name, space padding: what `safetensors.numpy.save_file`
  // writes.
  std::string header = "{\"__metadata__\":{\"format\":\"np\"}," + entry("b", "F16", "[2]", 0, 4) +
                       "," + entry("a", "I8", "[1]", 4, 5) + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = std::string("\x00\x3c\x00\xc0", 4) + "\xff";
  const std::string p = write_file("py.safetensors", image(header, data));
  const auto t = read_safetensors(p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("b").dtype(), DType::kF16);
  EXPECT_EQ(t.at("b").data<uint16_t>()[0], 0x3c00);  // 1.0
  EXPECT_EQ(t.at("b").data<uint16_t>()[1], 0xc000);  // -2.0
  EXPECT_EQ(t.at("a").data<int8_t>()[0], -1);
  EXPECT_EQ(SafetensorsFile(p).metadata().at("format"), "np");
}

TEST_F(SafetensorsTest, AcceptsEmptyTensorsAnywhereOnTheTiling) {
  const std::string header = "{" + entry("e0", "F32", "[0]", 0, 0) + "," +
                             entry("e1", "BF16", "[4,0]", 0, 0) + "," +
                             entry("x", "I32", "[1]", 0, 4) + "," + entry("e2", "U8", "[0]", 4, 4) +
                             "," + entry("s", "U8", "[]", 4, 5) + "}";
  const std::string p = write_file("empty.safetensors", image(header, "ABCDE"));
  const SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_TRUE(f.bytes(*f.find("e2")).empty());
  ASSERT_EQ(f.bytes(*f.find("s")).size(), 1u);
  EXPECT_EQ(f.bytes(*f.find("s"))[0], std::byte('E'));
  EXPECT_TRUE(f.find("s")->shape.empty());
}

TEST_F(SafetensorsTest, AcceptsTrailingWhitespaceNullMetadataAndNoTensors) {
  EXPECT_NO_THROW(SafetensorsFile(write_file("a.safetensors", image("{}      ", ""))));
  EXPECT_NO_THROW(
      SafetensorsFile(write_file("b.safetensors", image("{\"__metadata__\":null}\n", ""))));
  const SafetensorsFile f(write_file("c.safetensors", image("{\"__metadata__\":{}}", "")));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
  // Fields the reference reader does not know are ignored, as serde does.
  const std::string extra =
      "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":[1]}}";
  EXPECT_NO_THROW(SafetensorsFile(write_file("d.safetensors", image(extra, "z"))));
}

TEST_F(SafetensorsTest, ManyTensorsStayFast) {
  // MoE checkpoints carry tens of thousands of tensors per folder; parsing must stay linear.
  std::vector<Tensor> owned;
  owned.reserve(20000);
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (int i = 0; i < 20000; ++i) {
    owned.push_back(filled(DType::kU8, {i % 3}, static_cast<uint8_t>(i)));
    tensors.emplace_back("model.layers." + std::to_string(i / 128) + ".mlp.experts." +
                             std::to_string(i % 128) + ".w",
                         &owned.back());
  }
  write_safetensors(path("many/model.safetensors"), tensors);
  const Checkpoint ck(path("many"));
  EXPECT_EQ(ck.names().size(), 20000u);
  EXPECT_EQ(ck.total_size_bytes(), 19999u);  // 6666 * (0 + 1 + 2) + 0 + 1
  EXPECT_TRUE(same_bytes(ck.read("model.layers.156.mlp.experts.31.w"), owned[19999]));
}

// ---- rejections: file level --------------------------------------------------------------------

TEST_F(SafetensorsTest, RejectsFileShorterThanTheLengthPrefix) {
  const std::string p = write_file("short.safetensors", "abc");
  const std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_TRUE(contains(msg, p));
  EXPECT_TRUE(contains(msg, "too short"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile f(path("absent.safetensors")); }),
                       path("absent.safetensors")));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile f(dir_.string()); }), "not a regular file"));
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastTheEnd) {
  const std::string msg = open_error("{}", "", 100);
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(msg, "runs past the end"));
}

TEST_F(SafetensorsTest, RejectsHeaderLongerThanTheLimit) {
  const std::string msg = open_error("{}", "", kMaxSafetensorsHeaderBytes + 1);
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(msg, "exceeds the limit"));
  EXPECT_TRUE(contains(open_error("{}", "", UINT64_MAX), "exceeds the limit"));
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  for (const std::string& header : std::vector<std::string>{
           "{\"a\":{", "{\"a\":1,}", "{} x", std::string("{}\0", 3), "{\"\xff\":1}",
           "{\"\xed\xa0\x80\":1}", "{\"a\":\"\\ud800\"}", "{/*c*/}"}) {
    SCOPED_TRACE(header);
    const std::string msg = open_error(header, "");
    EXPECT_TRUE(contains(msg, path("bad.safetensors")));
    EXPECT_TRUE(contains(msg, "not valid UTF-8 JSON"));
  }
}

TEST_F(SafetensorsTest, RejectsHeadersThatAreNotObjects) {
  for (const std::string header : {"", "[]", "\"x\"", "1", " {}", "\xef\xbb\xbf{}", "null"}) {
    SCOPED_TRACE(header);
    const std::string msg = open_error(header, "");
    EXPECT_TRUE(contains(msg, path("bad.safetensors")));
    EXPECT_TRUE(contains(msg, "does not start with '{'"));
  }
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  std::string msg = open_error("{\"__metadata__\":{\"k\":1}}", "");
  EXPECT_TRUE(contains(msg, "'k'"));
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(open_error("{\"__metadata__\":[\"a\"]}", ""), "__metadata__"));
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
  const std::string x = entry("x", "U8", "[1]", 0, 1);
  std::string msg = open_error("{" + x + "," + x + "}", "a");
  EXPECT_TRUE(contains(msg, "duplicate key 'x'"));
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));

  msg = open_error(
      "{\"y\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a");
  EXPECT_TRUE(contains(msg, "duplicate key 'dtype'"));
  EXPECT_TRUE(contains(msg, "tensor 'y'"));
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));

  msg = open_error("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", "");
  EXPECT_TRUE(contains(msg, "duplicate key 'k' in __metadata__"));
}

// ---- rejections: per tensor --------------------------------------------------------------------

struct BadEntryCase {
  const char* label;
  std::string header;  // one tensor named "t"
  std::string data;
  std::string expected;  // a fragment of the message
};

class SafetensorsBadEntryTest : public SafetensorsTest,
                                public ::testing::WithParamInterface<BadEntryCase> {};

TEST_P(SafetensorsBadEntryTest, NamesFileTensorAndProblem) {
  const auto& c = GetParam();
  const std::string msg = open_error(c.header, c.data);
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(msg, "'t'"));
  EXPECT_TRUE(contains(msg, c.expected));
}

std::string one(const std::string& body) { return "{\"t\":" + body + "}"; }

INSTANTIATE_TEST_SUITE_P(
    Rejections, SafetensorsBadEntryTest,
    ::testing::Values(
        BadEntryCase{"NotAnObject", one("[1]"), "", "not an object"},
        BadEntryCase{"UnknownDtype", "{" + entry("t", "F4", "[2]", 0, 1) + "}", "a",
                     "unknown dtype 'F4' for tensor 't' in "},
        BadEntryCase{"LowercaseDtype", "{" + entry("t", "f32", "[1]", 0, 4) + "}", "abcd",
                     "unknown dtype 'f32'"},
        BadEntryCase{"DtypeNotString", one("{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}"),
                     "abcd", "'dtype' is a number"},
        BadEntryCase{"MissingDtype", one("{\"shape\":[1],\"data_offsets\":[0,4]}"), "abcd",
                     "missing 'dtype'"},
        BadEntryCase{"MissingShape", one("{\"dtype\":\"U8\",\"data_offsets\":[0,1]}"), "a",
                     "missing 'shape'"},
        BadEntryCase{"MissingOffsets", one("{\"dtype\":\"U8\",\"shape\":[1]}"), "a",
                     "missing 'data_offsets'"},
        BadEntryCase{"ShapeNotArray", "{" + entry("t", "U8", "1", 0, 1) + "}", "a",
                     "'shape' is a number"},
        BadEntryCase{"ShapeFloat", "{" + entry("t", "U8", "[1.0]", 0, 1) + "}", "a",
                     "not a non-negative integer"},
        BadEntryCase{"ShapeString", "{" + entry("t", "U8", "[\"1\"]", 0, 1) + "}", "a",
                     "not a non-negative integer"},
        BadEntryCase{"ShapeNested", "{" + entry("t", "U8", "[[1]]", 0, 1) + "}", "a",
                     "not a non-negative integer"},
        BadEntryCase{"NegativeDim", "{" + entry("t", "U8", "[2,-1]", 0, 0) + "}", "",
                     "negative dimension -1"},
        BadEntryCase{"DimBeyondInt64",
                     "{" + entry("t", "U8", "[0,9223372036854775808]", 0, 0) + "}", "",
                     "too large"},
        BadEntryCase{"DimBeyondUint64",
                     "{" + entry("t", "U8", "[0,18446744073709551616]", 0, 0) + "}", "",
                     "not a non-negative integer"},
        BadEntryCase{"NumelOverflow",
                     "{" + entry("t", "U8", "[4294967296,4294967296,2]", 0, 0) + "}", "",
                     "element count"},
        BadEntryCase{"NumelOverflowBeforeZero",
                     "{" + entry("t", "U8", "[4294967296,4294967296,0]", 0, 0) + "}", "",
                     "overflows"},
        BadEntryCase{"ByteSizeOverflow",
                     "{" + entry("t", "F32", "[4611686018427387904]", 0, 0) + "}", "", "byte size"},
        BadEntryCase{"OffsetsNotArray", one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":1}"),
                     "a", "two non-negative integers"},
        BadEntryCase{"OffsetsThree",
                     one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}"), "a",
                     "two non-negative integers"},
        BadEntryCase{"OffsetsNegative",
                     one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}"), "a",
                     "negative"},
        BadEntryCase{"OffsetsFloat",
                     one("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.5]}"), "a",
                     "two non-negative integers"},
        BadEntryCase{"BeginAfterEnd", "{" + entry("t", "U8", "[0]", 2, 1) + "}", "ab",
                     "begin after they end"},
        BadEntryCase{"EndPastBuffer", "{" + entry("t", "U8", "[4]", 0, 4) + "}", "abc",
                     "run past the end of the 3-byte data buffer"},
        BadEntryCase{"HugeOffsets", "{" + entry("t", "U8", "[0]", UINT64_MAX, UINT64_MAX) + "}", "",
                     "run past the end"},
        BadEntryCase{"SizeMismatch", "{" + entry("t", "F32", "[3]", 0, 8) + "}", "abcdefgh",
                     "hold 8 bytes but F32 [3] needs 12"},
        BadEntryCase{"GapAtStart", "{" + entry("t", "U8", "[2]", 2, 4) + "}", "abcd",
                     "bytes [0, 2) before"},
        BadEntryCase{"GapAtEnd", "{" + entry("t", "U8", "[2]", 0, 2) + "}", "abcd",
                     "bytes [2, 4) after"}),
    [](const ::testing::TestParamInfo<BadEntryCase>& p) { return std::string(p.param.label); });

TEST_F(SafetensorsTest, RejectsOverlapNamingBothTensors) {
  const std::string header =
      "{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}";
  const std::string msg = open_error(header, std::string(12, 'x'));
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(msg, "'a' [0, 8)"));
  EXPECT_TRUE(contains(msg, "'b' [4, 12)"));
  EXPECT_TRUE(contains(msg, "overlap"));

  // Two tensors on the same bytes.
  const std::string same =
      "{" + entry("p", "U8", "[4]", 0, 4) + "," + entry("q", "I32", "[1]", 0, 4) + "}";
  const std::string msg2 = open_error(same, "abcd");
  EXPECT_TRUE(contains(msg2, "'p'"));
  EXPECT_TRUE(contains(msg2, "'q'"));
}

TEST_F(SafetensorsTest, RejectsGapNamingItsNeighbours) {
  const std::string header =
      "{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 8, 12) + "}";
  const std::string msg = open_error(header, std::string(12, 'x'));
  EXPECT_TRUE(contains(msg, path("bad.safetensors")));
  EXPECT_TRUE(contains(msg, "bytes [4, 8)"));
  EXPECT_TRUE(contains(msg, "'a'"));
  EXPECT_TRUE(contains(msg, "'b'"));

  // Data but no tensors at all.
  EXPECT_TRUE(contains(open_error("{}", "abc"), "bytes [0, 3)"));
}

TEST_F(SafetensorsTest, ParseHeaderIsPureAndUsesTheGivenName) {
  const auto tensors = parse_safetensors_header(
      "{" + entry("b", "U8", "[2]", 2, 4) + "," + entry("a", "U8", "[2]", 0, 2) + "}", 4, "mem");
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "a");  // file order
  EXPECT_EQ(tensors[1].size_bytes(), 2u);
  EXPECT_TRUE(contains(error_of([] { parse_safetensors_header("{}", 1, "mem"); }), "mem"));
}

// ---- lazy mapping ------------------------------------------------------------------------------

TEST_F(SafetensorsTest, OpeningReadsOnlyTheHeader) {
  // The data region is garbage: opening still succeeds, and bytes() hands the garbage back.
  const std::string header = "{" + entry("w", "BF16", "[2]", 0, 4) + "}";
  const std::string p = write_file("lazy.safetensors", image(header, "\xde\xad\xbe\xef"));
  const SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 1u);
  const auto b = f.bytes(f.tensors()[0]);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], std::byte{0xde});

  // A 3 GiB sparse data region: opening and sizing must not touch it.
  const std::string big_header = "{" + entry("huge", "U8", "[3221225472]", 0, 3221225472ULL) + "}";
  const std::string big = write_file("big/model.safetensors", image(big_header, ""));
  fs::resize_file(big, 8 + big_header.size() + 3221225472ULL);
  const Checkpoint ck(path("big"));
  EXPECT_EQ(ck.total_size_bytes(), 3221225472ULL);
  EXPECT_EQ(ck.info("huge").shape, (std::vector<int64_t>{3221225472LL}));
}

TEST_F(SafetensorsTest, TruncationAfterOpeningIsAnErrorNotACrash) {
  const std::string header = "{" + entry("w", "U8", "[8]", 0, 8) + "}";
  const std::string p = write_file("trunc.safetensors", image(header, "abcdefgh"));
  const SafetensorsFile f(p);
  fs::resize_file(p, 8 + header.size() + 2);
  const std::string msg = error_of([&] { (void)f.bytes(f.tensors()[0]); });
  EXPECT_TRUE(contains(msg, p));
  EXPECT_TRUE(contains(msg, "changed size"));
}

TEST_F(SafetensorsTest, ConcurrentFirstAccessMapsOnce) {
  const Tensor a = filled(DType::kF32, {64}, 1);
  const Tensor b = filled(DType::kI8, {33}, 2);
  const std::string p = path("mt.safetensors");
  write_safetensors(p, {{"a", &a}, {"b", &b}});
  const SafetensorsFile f(p);
  std::vector<const std::byte*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i)
    threads.emplace_back([&, i] { seen[i] = f.bytes(*f.find(i % 2 ? "b" : "a")).data(); });
  for (auto& t : threads) t.join();
  for (size_t i = 2; i < seen.size(); ++i) EXPECT_EQ(seen[i], seen[i % 2]);
  EXPECT_EQ(std::memcmp(f.bytes(*f.find("b")).data(), b.raw(), 33), 0);
}

// ---- checkpoints -------------------------------------------------------------------------------

TEST_F(SafetensorsTest, CheckpointWithASingleFile) {
  const Tensor w = filled(DType::kBF16, {4, 2}, 3);
  const Tensor s = filled(DType::kF32, {4}, 4);
  write_safetensors(path("ck/model.safetensors"), {{"layer.w", &w}, {"layer.s", &s}});
  // Without an index, model.safetensors wins over other *.safetensors files.
  write_safetensors(path("ck/other.safetensors"), {{"stray", &w}});

  Checkpoint ck(path("ck"));
  EXPECT_EQ(ck.config_path(), path("ck") + "/config.json");
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"layer.s", "layer.w"}));
  EXPECT_TRUE(ck.has("layer.w"));
  EXPECT_FALSE(ck.has("stray"));
  EXPECT_EQ(ck.info("layer.w").dtype, DType::kBF16);
  EXPECT_EQ(ck.file_of("layer.s"), path("ck/model.safetensors"));
  EXPECT_EQ(ck.total_size_bytes(), w.size_bytes() + s.size_bytes());
  const Tensor back = ck.read("layer.w");
  EXPECT_EQ(back.shape(), w.shape());
  EXPECT_TRUE(same_bytes(back, w));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(back.raw()) % 64, 0u);

  for (const auto& f : std::vector<std::function<void()>>{[&] { (void)ck.info("nope"); },
                                                          [&] { (void)ck.read("nope"); },
                                                          [&] { (void)ck.file_of("nope"); }}) {
    EXPECT_EQ(error_of(f), "tensor 'nope' not found in checkpoint " + path("ck"));
  }

  const Checkpoint moved(std::move(ck));
  EXPECT_TRUE(same_bytes(moved.read("layer.s"), s));
}

TEST_F(SafetensorsTest, CheckpointFolderMustExistAndHoldSafetensors) {
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("nowhere")); }), path("nowhere")));
  write_file("plain/config.json", "{}");
  const std::string msg = error_of([&] { Checkpoint ck(path("plain")); });
  EXPECT_TRUE(contains(msg, path("plain")));
  EXPECT_TRUE(contains(msg, "*.safetensors"));
}

TEST_F(SafetensorsTest, CheckpointFallsBackToEverySafetensorsFileSorted) {
  const Tensor a = filled(DType::kU8, {3}, 1);
  const Tensor b = filled(DType::kI16, {2}, 2);
  write_safetensors(path("glob/b.safetensors"), {{"x.b", &b}});
  write_safetensors(path("glob/a.safetensors"), {{"x.a", &a}});
  write_file("glob/notes.txt", "not a shard");
  const Checkpoint ck(path("glob"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x.a", "x.b"}));
  EXPECT_EQ(ck.file_of("x.b"), path("glob/b.safetensors"));
  EXPECT_TRUE(same_bytes(ck.read("x.a"), a));
  EXPECT_EQ(ck.total_size_bytes(), 7u);
}

TEST_F(SafetensorsTest, CheckpointRejectsATensorInTwoShards) {
  const Tensor a = filled(DType::kU8, {3}, 1);
  write_safetensors(path("dup/1.safetensors"), {{"same", &a}});
  write_safetensors(path("dup/2.safetensors"), {{"same", &a}});
  const std::string msg = error_of([&] { Checkpoint ck(path("dup")); });
  EXPECT_TRUE(contains(msg, "'same'"));
  EXPECT_TRUE(contains(msg, path("dup/1.safetensors")));
  EXPECT_TRUE(contains(msg, path("dup/2.safetensors")));
}

class ShardedCheckpointTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    write_safetensors(path("sh/model-00001-of-00002.safetensors"),
                      {{"l0.w", &w0_}, {"l0.s", &s0_}});
    write_safetensors(path("sh/model-00002-of-00002.safetensors"), {{"l1.w", &w1_}});
  }
  void write_index(const std::string& weight_map) {
    write_file("sh/model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":60},\"weight_map\":" + weight_map + "}");
  }
  std::string index_path() const { return path("sh/model.safetensors.index.json"); }
  static constexpr const char* kGood =
      "{\"l0.w\":\"model-00001-of-00002.safetensors\",\"l0.s\":\"model-00001-of-00002."
      "safetensors\","
      "\"l1.w\":\"model-00002-of-00002.safetensors\"}";

  Tensor w0_ = filled(DType::kF8E4M3, {4, 4}, 1);
  Tensor s0_ = filled(DType::kBF16, {4}, 2);
  Tensor w1_ = filled(DType::kI32, {2, 4}, 3);
};

TEST_F(ShardedCheckpointTest, ReadsEveryShardThroughTheIndex) {
  write_index(kGood);
  const Checkpoint ck(path("sh"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"l0.s", "l0.w", "l1.w"}));
  EXPECT_EQ(ck.file_of("l1.w"), path("sh/model-00002-of-00002.safetensors"));
  EXPECT_TRUE(same_bytes(ck.read("l1.w"), w1_));
  EXPECT_TRUE(same_bytes(ck.read("l0.w"), w0_));
  EXPECT_EQ(ck.total_size_bytes(), 16u + 8u + 32u);
}

TEST_F(ShardedCheckpointTest, RejectsAMissingShard) {
  write_index(
      "{\"l0.w\":\"model-00001-of-00002.safetensors\",\"l9.w\":\"model-00009.safetensors\"}");
  const std::string msg = error_of([&] { Checkpoint ck(path("sh")); });
  EXPECT_TRUE(contains(msg, "'model-00009.safetensors'"));
  EXPECT_TRUE(contains(msg, "'l9.w'"));
  EXPECT_TRUE(contains(msg, index_path()));
  EXPECT_TRUE(contains(msg, "does not exist"));
}

TEST_F(ShardedCheckpointTest, RejectsATensorMissingFromItsShard) {
  write_index(
      "{\"l0.w\":\"model-00001-of-00002.safetensors\",\"ghost\":\"model-00002-of-00002."
      "safetensors\"}");
  std::string msg = error_of([&] { Checkpoint ck(path("sh")); });
  EXPECT_TRUE(contains(msg, "'ghost'"));
  EXPECT_TRUE(contains(msg, "model-00002-of-00002.safetensors"));

  // Listed in the wrong shard.
  write_index(
      "{\"l0.w\":\"model-00002-of-00002.safetensors\",\"l1.w\":\"model-00002-of-00002."
      "safetensors\","
      "\"l0.s\":\"model-00001-of-00002.safetensors\"}");
  msg = error_of([&] { Checkpoint ck(path("sh")); });
  EXPECT_TRUE(contains(msg, "'l0.w'"));
  EXPECT_TRUE(contains(msg, "(it is in " + path("sh/model-00001-of-00002.safetensors")));
}

TEST_F(ShardedCheckpointTest, RejectsBadIndexJson) {
  write_index("{\"l0.w\":");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), index_path()));

  write_file("sh/model.safetensors.index.json", "[1]");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), "not a JSON object"));

  write_file("sh/model.safetensors.index.json", "{\"metadata\":{}}");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), "no 'weight_map'"));

  write_index("[\"model-00001-of-00002.safetensors\"]");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), "'weight_map'"));

  write_index("{\"l0.w\":\"model-00001-of-00002.safetensors\",\"l0.s\":7}");
  std::string msg = error_of([&] { Checkpoint ck(path("sh")); });
  EXPECT_TRUE(contains(msg, "'l0.s'"));
  EXPECT_TRUE(contains(msg, index_path()));

  write_index("{\"l0.w\":\"../model-00001-of-00002.safetensors\"}");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), "not a file inside"));

  write_index(
      "{\"l0.w\":\"model-00001-of-00002.safetensors\",\"l0.w\":\"model-00001-of-00002."
      "safetensors\"}");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint ck(path("sh")); }), "duplicate key 'l0.w'"));
}

TEST_F(ShardedCheckpointTest, ReportsABrokenShardByName) {
  write_index(kGood);
  write_file("sh/model-00002-of-00002.safetensors",
             image("{" + entry("l1.w", "I32", "[2,4]", 0, 32) + "}", "x"));
  const std::string msg = error_of([&] { Checkpoint ck(path("sh")); });
  EXPECT_TRUE(contains(msg, path("sh/model-00002-of-00002.safetensors")));
  EXPECT_TRUE(contains(msg, "'l1.w'"));
}

}  // namespace
}  // namespace qmoe
