// Request framing and methods against a live server (issue 32): the forms a proxy in front may
// read differently from the server (folded lines, transfer codings, Transfer-Encoding with
// Content-Length) are refused with the connection closed, so no second request can hide in a
// body; HEAD is answered as GET without the body; methods are 405 or 501 by a fixed rule; the
// Bearer scheme is case-insensitive. Every exchange ends with the server closing the connection
// (a refusal, or Connection: close), so the tests wait for that, never for a time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "raw_connection.h"
#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Raw;
using testing::ServerProcess;
using testing::TempDir;

const std::string kKey = "Authorization: Bearer sekret\r\n";
const std::string kBody = "{\"prompt\":\"hi\"}";  // 15 bytes: chunk size "f"
const std::string kChunkedBody = "f\r\n" + kBody + "\r\n0\r\n\r\n";
// A request after the first on the same connection: answered only when the first one's framing
// was accepted, so a refused request shows as exactly one answer.
const std::string kNext = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

struct Answer {
  int status = 0;
  std::string head;  // status line and fields, without the empty line
  std::string body;
  // The first field of that name (case-insensitive), "" when absent.
  std::string header(const std::string& name) const {
    size_t p = head.find("\r\n");
    while (p != std::string::npos) {
      const size_t e = head.find("\r\n", p + 2);
      const std::string line = head.substr(p + 2, e == std::string::npos ? e : e - p - 2);
      const size_t colon = line.find(':');
      if (colon == name.size() && strncasecmp(line.data(), name.data(), name.size()) == 0)
        return line.substr(line.find_first_not_of(' ', colon + 1));
      p = e;
    }
    return "";
  }
};

// Splits what a connection received into answers framed by Content-Length; the answers to HEAD
// requests (`heads`, in order) are heads alone. Stops at anything that is not an answer.
std::vector<Answer> answers(const std::string& raw, const std::vector<bool>& heads = {}) {
  std::vector<Answer> out;
  size_t at = 0;
  while (at < raw.size() && raw.compare(at, 9, "HTTP/1.1 ") == 0) {
    const size_t end = raw.find("\r\n\r\n", at);
    if (end == std::string::npos) break;
    Answer a;
    a.head = raw.substr(at, end - at);
    a.status = std::stoi(a.head.substr(9, 3));
    at = end + 4;
    const bool head_only = out.size() < heads.size() && heads[out.size()];
    const std::string len = a.header("Content-Length");
    if (!head_only && !len.empty()) {
      a.body = raw.substr(at, std::stoul(len));
      at += a.body.size();
    }
    out.push_back(std::move(a));
  }
  if (at != raw.size()) out.push_back(Answer{-1, raw.substr(at), ""});  // trailing garbage
  return out;
}

class FramingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    srv_ = new ServerProcess(dir_->file("m"), {"--api-key", "sekret"});
  }
  static void TearDownTestSuite() {
    delete srv_;
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(srv_->ready()) << srv_->log(); }

  // Sends `bytes` on a fresh connection and returns everything answered until the server
  // closes it (bounded: a server that never closes fails the test after 30 s).
  static std::string exchange(const std::string& bytes) {
    Raw c(srv_->port());
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(c.send_all(bytes));
    bool closed = false;
    std::string got = c.read_for(30, &closed);
    EXPECT_TRUE(closed) << "the server did not close the connection: " << got;
    return got;
  }

  static TempDir* dir_;
  static ServerProcess* srv_;
};
TempDir* FramingTest::dir_ = nullptr;
ServerProcess* FramingTest::srv_ = nullptr;

// An obsolete folded line is a 400, whichever field it continues: Beast would join it to the
// field (a folded Content-Length counted), while a proxy may read it otherwise.
TEST_F(FramingTest, FoldedLinesAre400) {
  const std::string post = "POST /tokenize HTTP/1.1\r\nHost: x\r\n" + kKey;
  struct Case {
    const char* what;
    std::string request;
  };
  const Case cases[] = {
      {"Content-Length", post + "Content-Length:\r\n 15\r\n\r\n" + kBody + kNext},
      {"Content-Length, tab", post + "Content-Length:\r\n\t15\r\n\r\n" + kBody + kNext},
      {"Authorization",
       "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n sekret"
       "\r\n\r\n" +
           kNext},
      {"X-Note", "GET /health HTTP/1.1\r\nHost: x\r\nX-Note: a\r\n b\r\n\r\n" + kNext},
      {"after the request line", "GET /health HTTP/1.1\r\n Host: x\r\n\r\n" + kNext},
  };
  for (const Case& c : cases) {
    const auto got = answers(exchange(c.request));
    ASSERT_EQ(got.size(), 1u) << c.what;
    EXPECT_EQ(got[0].status, 400) << c.what << ": " << got[0].body;
    EXPECT_EQ(got[0].header("Connection"), "close") << c.what;
  }
  // The same requests unfolded are served.
  const auto ok = answers(exchange(post + "Content-Length: 15\r\n\r\n" + kBody + kNext));
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].status, 200) << ok[0].body;
  EXPECT_EQ(ok[1].status, 200);
}

// Transfer-Encoding is accepted only as one final `chunked` (any case), in HTTP/1.1, without
// Content-Length. A refusal answers once and closes: the request after it is never read, so
// nothing sent in or after a body the server could misframe is answered.
TEST_F(FramingTest, TransferEncodingVariants) {
  struct Case {
    std::string fields;  // the framing fields, each line ending in CRLF
    int status;          // 200: accepted (the next request is answered too)
    const char* version = "HTTP/1.1";
  };
  const auto te = [](const std::string& v) { return "Transfer-Encoding: " + v + "\r\n"; };
  const Case cases[] = {
      {te("chunked"), 200},
      {te("Chunked"), 200},
      {te("CHUNKED"), 200},
      {te("chunked,"), 200},  // an empty list element is ignored (RFC 9110 §5.6.1)
      {te("gzip, chunked"), 501},
      {te("gzip") + te("chunked"), 501},
      {te("x-custom;p=1, chunked"), 501},
      {te("chunked, gzip"), 400},
      {te("gzip"), 400},
      {te("identity"), 400},
      {te("chunked, chunked"), 400},
      {te("chunked") + te("chunked"), 400},
      {te("chunked") + te("gzip"), 400},
      {te("chunked;x=1"), 400},
      {te(""), 400},
      {te("x y, chunked"), 400},
      {te("chunked") + "Content-Length: 15\r\n", 400},
      {"Content-Length: 15\r\n" + te("chunked"), 400},
      {te("gzip") + "Content-Length: 15\r\n", 400},
      {te("chunked"), 400, "HTTP/1.0"},
  };
  for (const Case& c : cases) {
    const std::string request = std::string("POST /tokenize ") + c.version + "\r\nHost: x\r\n" +
                                kKey + c.fields + "\r\n" + kChunkedBody + kNext;
    const auto got = answers(exchange(request));
    ASSERT_FALSE(got.empty()) << c.fields;
    EXPECT_EQ(got[0].status, c.status) << c.fields << got[0].body;
    if (c.status == 200) {
      ASSERT_EQ(got.size(), 2u) << c.fields;
      EXPECT_NE(got[0].body.find("\"tokens\""), std::string::npos) << got[0].body;
      EXPECT_EQ(got[1].status, 200);
    } else {
      EXPECT_EQ(got.size(), 1u) << c.fields;
      EXPECT_EQ(got[0].header("Connection"), "close") << c.fields;
    }
  }
}

// HEAD on a GET route is GET's answer without the body: the same status and fields, the
// Content-Length of GET's body, and the next answer on the connection right after the head.
TEST_F(FramingTest, HeadIsGetWithoutTheBody) {
  for (const std::string path : {"/health", "/props"}) {
    const std::string raw =
        exchange("HEAD " + path + " HTTP/1.1\r\nHost: x\r\n" + kKey + "\r\nGET " + path +
                 " HTTP/1.1\r\nHost: x\r\n" + kKey + "Connection: close\r\n\r\n");
    const auto got = answers(raw, {true, false});
    ASSERT_EQ(got.size(), 2u) << raw;
    const Answer &head = got[0], &get = got[1];
    EXPECT_EQ(head.status, 200) << path;
    EXPECT_EQ(get.status, 200) << path;
    EXPECT_TRUE(head.body.empty());
    EXPECT_FALSE(get.body.empty());
    EXPECT_EQ(head.header("Content-Length"), std::to_string(get.body.size())) << path;
    EXPECT_EQ(head.header("Content-Type"), get.header("Content-Type")) << path;
  }
  // The errors of HEAD are heads too: a POST-only route is a 405 that allows POST, an unknown
  // path a 404.
  const auto got = answers(
      exchange("HEAD /tokenize HTTP/1.1\r\nHost: x\r\n" + kKey +
               "\r\nHEAD /nope HTTP/1.1\r\nHost: x\r\n" + kKey + "Connection: close\r\n\r\n"),
      {true, true});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, 405);
  EXPECT_EQ(got[0].header("Allow"), "POST");
  EXPECT_NE(got[0].header("Content-Length"), "0");
  EXPECT_EQ(got[1].status, 404);
  // A GET route allows HEAD.
  const auto post =
      answers(exchange("POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                       "Connection: close\r\n\r\n"));
  ASSERT_EQ(post.size(), 1u);
  EXPECT_EQ(post[0].status, 405);
  EXPECT_EQ(post[0].header("Allow"), "GET, HEAD");
}

// PUT, DELETE, PATCH and OPTIONS are 405 with Allow on a listed path and 404 elsewhere; TRACE,
// CONNECT and unknown tokens (methods are case-sensitive) are 501 on any path.
TEST_F(FramingTest, MethodsAre405Or501) {
  struct Case {
    std::string request_line;
    int status;
    const char* allow = "";
  };
  const Case cases[] = {
      {"OPTIONS /tokenize", 405, "POST"},
      {"OPTIONS /v1/chat/completions", 405, "POST"},
      {"PUT /health", 405, "GET, HEAD"},
      {"DELETE /v1/models", 405, "GET, HEAD"},
      {"PATCH /v1/responses", 405, "POST"},
      {"OPTIONS /nope", 404},
      {"OPTIONS *", 404},
      {"TRACE /health", 501},
      {"TRACE /v1/chat/completions", 501},
      {"TRACE /nope", 501},
      {"CONNECT 127.0.0.1:443", 501},
      {"FOO /health", 501},
      {"get /health", 501},
  };
  for (const Case& c : cases) {
    const auto got = answers(
        exchange(c.request_line + " HTTP/1.1\r\nHost: x\r\n" + kKey + "Connection: close\r\n\r\n"));
    ASSERT_EQ(got.size(), 1u) << c.request_line;
    EXPECT_EQ(got[0].status, c.status) << c.request_line << ": " << got[0].body;
    EXPECT_EQ(got[0].header("Allow"), c.allow) << c.request_line;
  }
  // On an Anthropic path the 501 is in Anthropic's shape.
  const auto got = answers(
      exchange("TRACE /v1/messages HTTP/1.1\r\nHost: x\r\n" + kKey + "Connection: close\r\n\r\n"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, 501);
  EXPECT_NE(got[0].body.find("\"type\":\"error\""), std::string::npos) << got[0].body;
}

// The auth scheme is case-insensitive (RFC 9110 §11.1); the key is not.
TEST_F(FramingTest, BearerSchemeIsCaseInsensitive) {
  const std::pair<const char*, int> cases[] = {
      {"Bearer sekret", 200}, {"bearer sekret", 200},  {"BEARER sekret", 200},
      {"bEaReR sekret", 200}, {"Bearer  sekret", 200}, {"Bearer SEKRET", 401},
      {"bearer wrong", 401},  {"Basic sekret", 401},   {"bearersekret", 401},
      {"Bearer", 401},
  };
  for (const auto& [auth, status] : cases) {
    const auto got = answers(exchange(std::string("GET /v1/models HTTP/1.1\r\nHost: x\r\n") +
                                      "Authorization: " + auth + "\r\nConnection: close\r\n\r\n"));
    ASSERT_EQ(got.size(), 1u) << auth;
    EXPECT_EQ(got[0].status, status) << auth;
  }
}

}  // namespace
}  // namespace qwen35
