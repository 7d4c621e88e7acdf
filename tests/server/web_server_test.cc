// The web chat page served by a live `qwen35 serve`: GET / and its files with their content types
// and the Content-Security-Policy, no inline script, bad paths, --no-web, --web-dir, the API key
// (the page loads without it, the API does not), /props, the timings of a streamed answer, and
// the URL on start. The file serving alone is web_files_test.cc; the page in a browser is
// web_page_test.cjs (scripts/test).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/web_page.h"
#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

std::string bundled_model() { return testing::source_dir() + "/models/qwen35-tiny-kjv"; }

// The /web/... paths that index.html loads (src= and href=).
std::vector<std::string> page_references(const std::string& html) {
  std::vector<std::string> out;
  for (const std::string attr : {"src=\"/web/", "href=\"/web/"}) {
    for (size_t p = html.find(attr); p != std::string::npos; p = html.find(attr, p + 1)) {
      const size_t start = p + attr.size() - 5, end = html.find('"', start);
      out.push_back(html.substr(start, end - start));
    }
  }
  return out;
}

// The attribute text of each <script ...> tag.
std::vector<std::string> script_tags(const std::string& html) {
  std::vector<std::string> out;
  for (size_t p = html.find("<script"); p != std::string::npos; p = html.find("<script", p + 1))
    out.push_back(html.substr(p, html.find('>', p) - p));
  return out;
}

class WebServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(bundled_model(), {"--parallel", "2", "--ctx", "512"});
    ASSERT_TRUE(server_->ready()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
  }
  static ServerProcess* server_;
};
ServerProcess* WebServerTest::server_ = nullptr;

TEST_F(WebServerTest, ServesThePageWithCsp) {
  auto r = server_->client().get("/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.header("Content-Security-Policy"), server::kWebCsp);
  EXPECT_NE(r.header("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(r.header("X-Content-Type-Options"), "nosniff");
  // Every script is a file of this server: the policy allows no inline script, so none is there.
  const auto scripts = script_tags(r.body);
  for (const std::string& tag : scripts)
    EXPECT_NE(tag.find(" src=\"/web/"), std::string::npos) << tag;
  EXPECT_EQ(scripts.size(), 4u);
  EXPECT_EQ(r.body.find("http://"), std::string::npos);  // nothing from elsewhere (no CDN)
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
}

TEST_F(WebServerTest, EveryReferencedFileHasItsType) {
  const std::string html = server_->get("/").second;
  const auto refs = page_references(html);
  EXPECT_EQ(refs.size(), 8u);
  for (const std::string& path : refs) {
    auto r = server_->client().get(path);
    ASSERT_EQ(r.status, 200) << path;
    EXPECT_FALSE(r.body.empty()) << path;
    const std::string type = r.header("Content-Type");
    const std::string want = path.ends_with(".js")    ? "text/javascript; charset=utf-8"
                             : path.ends_with(".css") ? "text/css; charset=utf-8"
                             : path.ends_with(".svg") ? "image/svg+xml"
                                                      : "?";
    EXPECT_EQ(type, want) << path;
    EXPECT_EQ(r.header("Content-Security-Policy"), server::kWebCsp) << path;
  }
  // The modules app.js imports.
  for (const char* path : {"/web/api.js", "/web/store.js", "/web/render.js"})
    EXPECT_EQ(server_->client().get(path).status, 200) << path;
}

TEST_F(WebServerTest, RevalidationGets304) {
  auto first = server_->client().get("/web/lib/highlight.min.js");
  ASSERT_EQ(first.status, 200);
  const std::string etag = first.header("ETag");
  ASSERT_FALSE(etag.empty());
  auto c = server_->client();
  c.set_header("If-None-Match", etag);
  auto again = c.get("/web/lib/highlight.min.js");
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(server_->get("/health").first, 200);  // the connection's framing held
}

TEST_F(WebServerTest, BadPathsAre404AndTheServerStaysUp) {
  for (const char* path : {"/web/../../etc/passwd", "/web/%2e%2e/%2e%2e/etc/passwd", "/web/.x",
                           "/web/", "/web/nope.js", "/index.html"}) {
    auto r = server_->client().get(path);
    EXPECT_EQ(r.status, 404) << path;
  }
  EXPECT_EQ(server_->client().post("/", "{}").status, 404);
  EXPECT_EQ(server_->get("/health").first, 200);
}

TEST_F(WebServerTest, Props) {
  auto [st, body] = server_->get("/props");
  ASSERT_EQ(st, 200);
  const Json p = Json::parse(body);
  EXPECT_EQ(p["model"], "qwen35-tiny-kjv");
  EXPECT_EQ(p["n_ctx"], 512);
  EXPECT_EQ(p["total_slots"], 2);
  EXPECT_EQ(p["chat"], true);
  // The bundled model's generation_config.json, as written there.
  EXPECT_EQ(p["default_generation_settings"]["temperature"], 0.7);
  EXPECT_EQ(p["default_generation_settings"]["top_p"], 0.8);
  EXPECT_EQ(p["default_generation_settings"]["top_k"], 20);
}

// The page's tokens/s comes from the stream's last chunk: the server's timings of the answer.
TEST_F(WebServerTest, StreamedUsageCarriesTimings) {
  const Json req = {{"messages", {{{"role", "user"}, {"content", "Tell me a fortune."}}}},
                    {"max_tokens", 16},
                    {"ignore_eos", true},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  const auto events = server_->stream("/v1/chat/completions", req);
  ASSERT_GE(events.size(), 3u);
  ASSERT_EQ(events.back(), "[DONE]");
  const Json last = Json::parse(events[events.size() - 2]);
  ASSERT_TRUE(last.contains("timings")) << last;
  const Json& t = last["timings"];
  const Json& u = last["usage"];
  EXPECT_EQ(u["completion_tokens"], 16);
  EXPECT_EQ(t["predicted_n"], 16);
  EXPECT_GT(t["predicted_ms"].get<double>(), 0);
  EXPECT_NEAR(t["predicted_per_second"].get<double>(), 15 * 1000 / t["predicted_ms"].get<double>(),
              1e-6);
  EXPECT_EQ(t["prompt_n"].get<int64_t>(),
            u["prompt_tokens"].get<int64_t>() -
                u["prompt_tokens_details"]["cached_tokens"].get<int64_t>());
  EXPECT_GT(t["prompt_ms"].get<double>(), 0);
}

TEST_F(WebServerTest, PrintsThePageUrl) {
  const std::string want = "chat page at http://127.0.0.1:" + std::to_string(server_->port()) + "/";
  EXPECT_NE(server_->log().find(want), std::string::npos) << server_->log();
}

TEST(WebServerOptions, NoWebTurnsThePageOff) {
  ServerProcess s(bundled_model(), {"--no-web", "--ctx", "256"});
  ASSERT_TRUE(s.ready()) << s.log();
  EXPECT_EQ(s.get("/").first, 404);
  EXPECT_EQ(s.get("/web/app.js").first, 404);
  EXPECT_EQ(s.get("/v1/models").first, 200);
  EXPECT_EQ(s.log().find("chat page at"), std::string::npos);
}

TEST(WebServerOptions, ApiKeyGuardsTheApiNotThePage) {
  ServerProcess s(bundled_model(), {"--api-key", "sekret", "--ctx", "256"});
  ASSERT_TRUE(s.ready()) << s.log();
  EXPECT_EQ(s.get("/").first, 200);
  EXPECT_EQ(s.get("/web/app.js").first, 200);
  EXPECT_EQ(s.get("/web/lib/purify.min.js").first, 200);
  EXPECT_EQ(s.get("/v1/models").first, 401);
  EXPECT_EQ(s.get("/props").first, 401);
  EXPECT_EQ(s.get("/metrics").first, 401);
  auto c = s.client();
  c.set_bearer_token("sekret");
  EXPECT_EQ(c.get("/props").status, 200);
  EXPECT_EQ(c.get("/v1/models").status, 200);
}

TEST(WebServerOptions, WebDir) {
  TempDir dir;
  testing::write_file(dir.file("index.html"), "<p>from the folder</p>");
  ServerProcess s(bundled_model(), {"--web-dir", dir.path(), "--ctx", "256"});
  ASSERT_TRUE(s.ready()) << s.log();
  EXPECT_EQ(s.get("/").second, "<p>from the folder</p>");
  EXPECT_EQ(s.get("/web/lib/marked.min.js").first, 200);  // not in the folder: embedded
  auto missing = testing::run_qwen35("serve -m " + bundled_model() + " --web-dir " +
                                     dir.file("nope") + " --port 0");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("--web-dir"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace qwen35
