// A replica behind a load balancer (issue 37), against a live server on loopback: the replica
// header, the affinity key (named by the client, or derived from the prompt's shared prefix),
// /ready, draining on SIGTERM, and --trusted-proxy's per-client caps. The balancer itself
// (HAProxy) is exercised by tests/cluster/cluster_test.py.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "raw_connection.h"
#include "server/affinity.h"
#include "server/client_address.h"
#include "server_process.h"
#include "tiny_checkpoint_suite.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::Raw;
using testing::ServerProcess;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class ReplicaTest : public testing::TinyCheckpointSuite<ReplicaTest> {};

// A system prompt long enough for a 64-token shared part, and a chat body around it.
std::string long_system(const std::string& who) {
  std::string s = "You are " + who + ". ";
  for (int i = 0; i < 40; ++i) s += "Answer briefly and kindly. ";
  return s;
}
Json chat(const std::string& system, const std::string& user) {
  return Json{{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}},
              {"max_tokens", 2},
              {"temperature", 0}};
}

server::ClientResponse post(const ServerProcess& srv, const std::string& path, const Json& body,
                            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  auto c = srv.client();
  for (const auto& [k, v] : headers) c.set_header(k, v);
  return c.post(path, body.dump());
}

TEST_F(ReplicaTest, EveryAnswerNamesTheReplica) {
  ServerProcess srv(model(), {"--replica-id", "r7"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  auto c = srv.client();
  for (const char* path : {"/health", "/ready", "/metrics", "/nowhere"})
    EXPECT_EQ(c.get(path).header("X-Qwen35-Replica"), "r7") << path;
  EXPECT_EQ(post(srv, "/v1/chat/completions", chat("s", "hi")).header("X-Qwen35-Replica"), "r7");
  // The transport's own errors too: a malformed request.
  Raw raw(srv.port());
  ASSERT_TRUE(raw.send_all("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"));
  const std::string got = raw.read_for(5);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_NE(got.find("X-Qwen35-Replica: r7"), std::string::npos) << got;
}

TEST_F(ReplicaTest, AffinityKeyNamedByTheClientInOrder) {
  ServerProcess srv(model(), {});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const std::string h = server::kAffinityHeader;
  Json b = chat("s", "hi");
  b["user"] = "u1";
  EXPECT_EQ(post(srv, "/v1/chat/completions", b).header(h), "u1");
  EXPECT_EQ(post(srv, "/v1/chat/completions", b, {{"X-Session-Id", "s1"}}).header(h), "s1");
  b["prompt_cache_key"] = "k1";
  EXPECT_EQ(post(srv, "/v1/chat/completions", b, {{"X-Session-Id", "s1"}}).header(h), "k1");
  Json m = {{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"metadata", {{"user_id", "anthropic-user"}}}};
  EXPECT_EQ(post(srv, "/v1/messages", m).header(h), "anthropic-user");
  Json r = {{"input", "hi"}, {"max_output_tokens", 16}, {"prompt_cache_key", "resp-key"}};
  EXPECT_EQ(post(srv, "/v1/responses", r).header(h), "resp-key");
  Json comp = {{"prompt", "hi"}, {"max_tokens", 2}, {"prompt_cache_key", "c"}};
  EXPECT_EQ(post(srv, "/v1/completions", comp).header(h), "c");
  // A key that cannot travel in a header as written comes back hashed (FNV-1a 64, by hand
  // below): never a header split by a newline.
  b["prompt_cache_key"] = "a\r\nX-Evil: 1";
  const auto got = post(srv, "/v1/chat/completions", b);
  EXPECT_EQ(got.header("X-Evil"), "");
  char want[40];
  std::snprintf(want, sizeof want, "h-%016llx",
                (unsigned long long)server::fnv1a64("a\r\nX-Evil: 1"));
  EXPECT_EQ(got.header(h), want);
}

// FNV-1a 64 against its published test vectors (an independent expectation of the hash).
TEST(Affinity, Fnv1a64Vectors) {
  EXPECT_EQ(server::fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(server::fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(server::fnv1a64("foobar"), 0x85944171f73967e8ull);
}

// The derived key: the same for every turn of a conversation and for conversations that share a
// system prompt of 64 tokens or more; different for a different system prompt.
TEST_F(ReplicaTest, DerivedKeyFollowsTheSharedPrefix) {
  ServerProcess srv(model(), {});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const std::string h = server::kAffinityHeader;
  const std::string a = long_system("Ann"), b = long_system("Bob");
  const std::string k1 = post(srv, "/v1/chat/completions", chat(a, "first question")).header(h);
  ASSERT_EQ(k1.rfind("prefix-", 0), 0u) << k1;
  Json turn2 = chat(a, "first question");
  turn2["messages"].push_back({{"role", "assistant"}, {"content", "an answer"}});
  turn2["messages"].push_back({{"role", "user"}, {"content", "and a second one"}});
  EXPECT_EQ(post(srv, "/v1/chat/completions", turn2).header(h), k1);
  EXPECT_EQ(post(srv, "/v1/chat/completions", chat(a, "another talk")).header(h), k1);
  EXPECT_NE(post(srv, "/v1/chat/completions", chat(b, "first question")).header(h), k1);
  // /metrics: the hit ratio is hits / (hits + misses) of its own counters; turn 2 was a hit.
  const double hits = srv.metric("qwen35_prefix_cache_hits_total");
  const double misses = srv.metric("qwen35_prefix_cache_misses_total");
  ASSERT_GT(hits, 0);
  EXPECT_DOUBLE_EQ(srv.metric("qwen35_prefix_cache_hit_ratio"), hits / (hits + misses));
  // Its value: the hash of the prompt's first 64-grid tokens of the system part, as /tokenize
  // gives them (the system part ends where the prompts of two user messages part).
  auto ids_of = [&](const Json& body) {
    return post(srv, "/tokenize", Json{{"messages", body["messages"]}}).body;
  };
  const Json x = Json::parse(ids_of(chat(a, "first question")))["tokens"];
  const Json y = Json::parse(ids_of(chat(a, "zzz")))["tokens"];
  size_t shared = 0;
  while (shared < x.size() && shared < y.size() && x[shared] == y[shared]) ++shared;
  ASSERT_GE(shared, 64u);
  std::string bytes;
  for (size_t i = 0; i < shared / 64 * 64; ++i) {
    const uint32_t v = x[i].get<uint32_t>();
    for (int k = 0; k < 4; ++k) bytes.push_back(char((v >> (8 * k)) & 0xff));
  }
  char want[40];
  std::snprintf(want, sizeof want, "prefix-%016llx", (unsigned long long)server::fnv1a64(bytes));
  EXPECT_EQ(k1, want);
}

TEST_F(ReplicaTest, ReadyFailsWhileDrainingAndInFlightRequestsFinish) {
  TempDir cache;
  ServerProcess srv(model(), {"--drain-s", "20", "--cache-dir", cache.file("c"), "--parallel", "1"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  EXPECT_EQ(srv.get("/ready").first, 200);
  EXPECT_EQ(srv.get("/ready").second, "{\"status\":\"ready\"}");
  // A stream that is running when SIGTERM comes: it must end normally, not as cancelled.
  Json body = chat(long_system("Cy"), "tell me a long story");
  body["max_tokens"] = 200;
  body["stream"] = true;
  body["ignore_eos"] = true;
  std::vector<std::string> events;
  std::atomic<bool> first{false};
  std::thread client([&] {
    std::string all;
    srv.client().send("POST", "/v1/chat/completions", body.dump(), [&](std::string_view d) {
      all.append(d);
      first.store(true);
      return true;
    });
    events.push_back(all);
  });
  const auto t0 = Clock::now();
  while (!first.load() && since(t0) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(first.load());
  kill(srv.pid(), SIGTERM);
  // Readiness fails at once: the listener is closed, so a new connection is refused.
  bool refused = false;
  for (int i = 0; i < 400 && !refused; ++i) {
    refused = !Raw(srv.port()).ok();
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(refused);
  client.join();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("\"finish_reason\":\"length\""), std::string::npos) << events[0];
  EXPECT_EQ(events[0].find("\"finish_reason\":\"abort\""), std::string::npos);
  EXPECT_NE(events[0].find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(srv.stop(), 0);
  EXPECT_NE(srv.log().find("draining"), std::string::npos) << srv.log();
  EXPECT_NE(srv.log().find("saved "), std::string::npos) << srv.log();
  EXPECT_FALSE(std::filesystem::is_empty(cache.file("c")));
}

// A stream still running when the drain ends is cut with its API's final event: finish_reason
// "abort" and [DONE], and the process exits soon after (the drain's bound, not the stream's).
TEST_F(ReplicaTest, DrainDeadlineCutsStreamsWithTheirFinalEvent) {
  ServerProcess srv(model(), {"--drain-s", "0.3", "--ctx", "16384"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  Json body = chat("s", "go on forever");
  body["max_tokens"] = 16000;
  body["ignore_eos"] = true;
  body["stream"] = true;
  std::string all;
  std::atomic<bool> first{false};
  std::thread client([&] {
    srv.client().send("POST", "/v1/chat/completions", body.dump(), [&](std::string_view d) {
      all.append(d);
      first.store(true);
      return true;
    });
  });
  const auto t0 = Clock::now();
  while (!first.load() && since(t0) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(first.load());
  const auto t_term = Clock::now();
  kill(srv.pid(), SIGTERM);
  client.join();
  EXPECT_EQ(srv.stop(), 0);
  EXPECT_LT(since(t_term), 10.0);
  EXPECT_NE(all.find("\"finish_reason\":\"abort\""), std::string::npos) << all.substr(all.size() - 400);
  EXPECT_NE(all.find("data: [DONE]"), std::string::npos);
}

TEST_F(ReplicaTest, ReadyQueueBound) {
  // --ready-queue 1 with one slot: while one request runs and another waits, /ready is 503.
  ServerProcess srv(model(), {"--ready-queue", "1", "--parallel", "1"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  EXPECT_EQ(srv.get("/ready").first, 200);
  Json body = chat("s", "a long answer please");
  body["max_tokens"] = 400;
  body["ignore_eos"] = true;
  // Three at once on one slot: two wait until the first is done, then one.
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) clients.emplace_back([&] { srv.post("/v1/chat/completions", body); });
  int seen = 0;
  const auto t0 = Clock::now();
  while (seen != 503 && since(t0) < 60) seen = srv.get("/ready").first;
  for (auto& t : clients) t.join();
  EXPECT_EQ(seen, 503);
  EXPECT_EQ(srv.get("/ready").first, 200);
}

// Behind a trusted proxy, the per-client cap counts requests by the client the proxy names:
// the proxy's own connections are not capped, and one client cannot lock out another.
TEST_F(ReplicaTest, TrustedProxyCountsForwardedClients) {
  ServerProcess srv(model(), {"--max-connections-per-client", "2", "--trusted-proxy", "127.0.0.1/32"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  // Idle connections from the proxy: more than the cap, all served.
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(std::make_unique<Raw>(srv.port()));
  // Two requests of client 10.1.1.1 whose bodies have not all arrived hold its two places; the
  // client a spoofing hop names on the left is not believed (the proxy appended the right one).
  auto partial = [&](const std::string& xff) {
    auto c = std::make_unique<Raw>(srv.port());
    EXPECT_TRUE(c->send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: " + xff +
                            "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"));
    return c;
  };
  auto p1 = partial("10.1.1.1");
  auto p2 = partial("6.6.6.6, 10.1.1.1");
  const auto status_as = [&](const std::string& xff) {
    auto c = srv.client();
    c.set_header("X-Forwarded-For", xff);
    return c.get("/health").status;
  };
  const auto t0 = Clock::now();
  int third = 0;
  while ((third = status_as("10.1.1.1")) != 503 && since(t0) < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(third, 503);
  EXPECT_EQ(status_as("10.2.2.2"), 200);
  EXPECT_EQ(status_as("10.1.1.1, 10.2.2.2"), 200);  // the rightmost untrusted hop is the client
  for (auto& c : idle) EXPECT_EQ(c->peek().find("503"), std::string::npos);
  p1.reset();
  p2.reset();
  int again = 0;
  while ((again = status_as("10.1.1.1")) != 200 && since(t0) < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(again, 200);
}

// loadtest --url: the multi-turn report through a base URL names the replica that answered,
// each conversation's turns stayed on it, and turn 2 was resumed (the system prompt is over 64
// tokens). Malformed URLs are refused by name.
TEST_F(ReplicaTest, LoadtestMultiTurnThroughUrl) {
  ServerProcess srv(model(), {"--replica-id", "r9"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  auto r = testing::run_qwen35("loadtest --url http://127.0.0.1:" + std::to_string(srv.port()) +
                               "/ --multi-turn --conversations 2 --turns 2 -c 1 --system-tokens 120 "
                               "--max-tokens 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["replicas"], Json({{"r9", 4}}));
  EXPECT_EQ(j["conversations_on_one_replica"], 2);
  EXPECT_EQ(j["later_turns_cached_share"], 1.0);
  for (const char* bad : {"ftp://127.0.0.1:1", "http://127.0.0.1", "http://127.0.0.1:70000",
                          "http://127.0.0.1:80/v1", "http://:80"}) {
    auto b = testing::run_qwen35(std::string("loadtest --url ") + bad + " --multi-turn");
    EXPECT_NE(b.exit_code, 0) << bad;
    EXPECT_NE(b.err.find("--url"), std::string::npos) << bad << ": " << b.err;
  }
}

TEST(ClientAddress, CidrAndForwardedHops) {
  auto lo = server::Cidr::parse("127.0.0.0/8");
  ASSERT_TRUE(lo.ok());
  EXPECT_TRUE(lo->contains("127.1.2.3"));
  EXPECT_TRUE(lo->contains("::ffff:127.0.0.1"));  // IPv4-mapped
  EXPECT_FALSE(lo->contains("128.0.0.1"));
  EXPECT_FALSE(lo->contains("::1"));
  EXPECT_FALSE(lo->contains("garbage"));
  auto v6 = server::Cidr::parse("2001:db8::/32");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->contains("2001:db8:1::5"));
  EXPECT_FALSE(v6->contains("2001:db9::5"));
  EXPECT_FALSE(server::Cidr::parse("10.0.0.0/33").ok());
  EXPECT_FALSE(server::Cidr::parse("10.0.0/8").ok());
  EXPECT_FALSE(server::Cidr::parse("10.0.0.0/x").ok());
  EXPECT_NE(server::Cidr::parse("nope").message().find("'nope'"), std::string::npos);
  const std::vector<server::Cidr> trusted = {*lo, *server::Cidr::parse("10.0.0.0/8")};
  using server::forwarded_client;
  EXPECT_EQ(forwarded_client("127.0.0.1", {}, {}, trusted), "127.0.0.1");
  EXPECT_EQ(forwarded_client("127.0.0.1", {"203.0.113.7"}, {}, trusted), "203.0.113.7");
  // Two proxies: the balancer (10.x) behind the edge (127.x); spoofed hops on the left ignored.
  EXPECT_EQ(forwarded_client("127.0.0.1", {"1.1.1.1, 203.0.113.7", "10.0.0.2"}, {}, trusted),
            "203.0.113.7");
  // An untrusted peer's headers are not read at all.
  EXPECT_EQ(forwarded_client("198.51.100.1", {"203.0.113.7"}, {}, trusted), "198.51.100.1");
  EXPECT_EQ(forwarded_client("127.0.0.1", {}, {"for=192.0.2.60;proto=http, for=\"[2001:db8::1]:4711\""},
                             trusted),
            "2001:db8::1");
  EXPECT_EQ(forwarded_client("127.0.0.1", {}, {"For=\"192.0.2.9:80\""}, trusted), "192.0.2.9");
  EXPECT_EQ(forwarded_client("127.0.0.1", {"unknown"}, {}, trusted), "unknown");
}

}  // namespace
}  // namespace qwen35
