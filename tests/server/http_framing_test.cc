// The transport's framing rules (server/http_framing.h) as pure functions; framing_test.cc checks
// them again against a live server.
#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qwen35::server {
namespace {

TEST(HttpFraming, HeadLengthIsUpToTheFirstEmptyLine) {
  EXPECT_EQ(head_length("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", 100), 27u);
  EXPECT_EQ(head_length("GET / HTTP/1.1\r\nHost: x\r\n", 100), 0u);
  EXPECT_EQ(head_length("GET / HTTP/1.1\nHost: x\n\n", 100), 0u);  // Beast needs CRLF CRLF too
  // Only the first `limit` bytes are searched.
  EXPECT_EQ(head_length("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27u);
  EXPECT_EQ(head_length("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 26), 0u);
}

TEST(HttpFraming, FoldedLinesAreRefused) {
  EXPECT_FALSE(check_head("GET / HTTP/1.1\r\nHost: x\r\nA: b c\r\n\r\n"));
  EXPECT_FALSE(check_head("GET / HTTP/1.1\r\n\r\n"));
  for (const char* head :
       {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 5\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\tc\r\n\r\n", "GET / HTTP/1.1\r\n Host: x\r\n\r\n"}) {
    const auto e = check_head(head);
    ASSERT_TRUE(e) << head;
    EXPECT_EQ(e->status, 400);
  }
}

TEST(HttpFraming, HeadRequest) {
  EXPECT_TRUE(is_head_request("HEAD / HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(is_head_request("head / HTTP/1.1\r\n\r\n"));  // methods are case-sensitive
  EXPECT_FALSE(is_head_request("HEADER / HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(is_head_request("GET / HTTP/1.1\r\n\r\n"));
}

// The status check_transfer_encoding gives (0: accepted).
int te_status(std::vector<std::string_view> values, bool content_length = false,
              unsigned version = 11) {
  const auto e = check_transfer_encoding(values, content_length, version);
  return e ? e->status : 0;
}

TEST(HttpFraming, TransferEncodingIsOneFinalChunked) {
  EXPECT_EQ(te_status({}), 0);
  EXPECT_EQ(te_status({}, true), 0);  // Content-Length alone is Beast's to check
  EXPECT_EQ(te_status({"chunked"}), 0);
  EXPECT_EQ(te_status({"Chunked"}), 0);
  EXPECT_EQ(te_status({" chunked ,"}), 0);
  EXPECT_EQ(te_status({"", "chunked"}), 0);
  // Other codings before chunked: the framing is readable, the coding is not implemented.
  EXPECT_EQ(te_status({"gzip, chunked"}), 501);
  EXPECT_EQ(te_status({"gzip", "chunked"}), 501);
  EXPECT_EQ(te_status({"gzip;level=1, chunked"}), 501);
  // The body's length cannot be known.
  EXPECT_EQ(te_status({"chunked, gzip"}), 400);
  EXPECT_EQ(te_status({"chunked", "gzip"}), 400);
  EXPECT_EQ(te_status({"gzip"}), 400);
  EXPECT_EQ(te_status({"identity"}), 400);
  EXPECT_EQ(te_status({"chunked, chunked"}), 400);
  EXPECT_EQ(te_status({"chunked", "chunked"}), 400);
  EXPECT_EQ(te_status({"gzip, chunked, chunked"}), 400);
  EXPECT_EQ(te_status({"chunked;x=1"}), 400);
  EXPECT_EQ(te_status({""}), 400);
  EXPECT_EQ(te_status({" , "}), 400);
  EXPECT_EQ(te_status({"x y, chunked"}), 400);
  EXPECT_EQ(te_status({"\"gzip\", chunked"}), 400);
  // With Content-Length, or in HTTP/1.0, whatever the codings.
  EXPECT_EQ(te_status({"chunked"}, true), 400);
  EXPECT_EQ(te_status({"gzip, chunked"}, true), 400);
  EXPECT_EQ(te_status({"chunked"}, false, 10), 400);
}

}  // namespace
}  // namespace qwen35::server
