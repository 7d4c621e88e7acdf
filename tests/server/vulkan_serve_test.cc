// `serve --device vulkan` on lavapipe (issue 49): the CPU server's equalities hold over HTTP on
// the device, bit for bit: *concurrent == solo* (greedy and seeded, chat and completions),
// *resumed == fresh* (turns, n = 4 forks, a --cache-dir restart under another spelling of the
// same device, a branch from a provisional snapshot on the device), *drafted == plain* (MTP and
// lookup), and each of them with an image. Faults are clean: a device that cannot hold the model
// or the pool refuses at start in one line; a failed allocation in a step is an error for its
// request and the next request's answer is a fresh one's; a lost device ends its request with an
// error in each API's shape, /health turns 503 and the process exits 1. /metrics reports the
// device's memory by use.
//
// Each with a compressed KV type (q8_0 keys, turbo4 values) too.
//
// Short prompts and answers: lavapipe runs a step of the bundled model in a fifth of a second.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "../vulkan/vk_test.h"
#include "image_http.h"
#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

const std::string kModel = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";

// The device's flags before `extra`; empty when there is no Vulkan device (the test skips).
std::vector<std::string> on_device(std::vector<std::string> extra, const std::string& device = "vulkan") {
  extra.insert(extra.begin(), {"--device", device});
  return extra;
}

#define REQUIRE_DEVICE()                                                 \
  do {                                                                   \
    std::string why;                                                     \
    if (!vulkan::test_instance(&why)) GTEST_SKIP() << "no Vulkan device: " << why; \
  } while (0)

std::string long_text(int sentences) {
  std::string s;
  for (int i = 0; i < sentences; ++i)
    s += "And the " + std::to_string(i) + " river went out of Eden to water the garden. ";
  return s;
}

// The answer's bits: choices without ids or timestamps.
std::string choices(const Json& r) { return r.contains("choices") ? r["choices"].dump() : r.dump(); }

// Four requests of different lengths: token-id completions, greedy and seeded, and a chat.
std::vector<std::pair<std::string, Json>> mixed_requests() {
  std::vector<std::pair<std::string, Json>> out;
  const int lengths[3] = {5, 70, 100}, gen[3] = {5, 4, 4};
  for (int i = 0; i < 3; ++i) {
    std::vector<int> prompt;
    for (int k = 0; k < lengths[i]; ++k) prompt.push_back((k * 37 + i * 101 + 11) % 4000);
    Json r = {{"prompt", prompt}, {"max_tokens", gen[i]}, {"ignore_eos", true},
              {"logprobs", 2},    {"return_token_ids", true}};
    if (i == 1) r["temperature"] = 0;
    else r.update({{"temperature", 0.9}, {"seed", 10 + i}});
    out.emplace_back("/v1/completions", r);
  }
  out.emplace_back("/v1/chat/completions",
                   Json{{"messages", {{{"role", "user"}, {"content", "Who made the light?"}}}},
                        {"max_tokens", 6},
                        {"temperature", 0.8},
                        {"seed", 5},
                        {"logprobs", true},
                        {"top_logprobs", 2},
                        {"chat_template_kwargs", {{"enable_thinking", false}}}});
  return out;
}

// Each request alone, then all at once: the same bits.
void expect_concurrent_equals_solo(const ServerProcess& s,
                                   const std::vector<std::pair<std::string, Json>>& reqs) {
  std::vector<std::string> solo(reqs.size()), together(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto [st, r] = s.post(reqs[i].first, reqs[i].second);
    ASSERT_EQ(st, 200) << r;
    solo[i] = choices(r);
  }
  std::vector<std::thread> ts;
  for (size_t i = 0; i < reqs.size(); ++i)
    ts.emplace_back([&, i] { together[i] = choices(s.post(reqs[i].first, reqs[i].second).second); });
  for (auto& t : ts) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "request " << i;
}

// `n` choices of one seeded request on `s` (its prompt computed once, forked on the device) are,
// each, the single request with seed + i on `plain`.
void expect_forks_equal_singles(const ServerProcess& s, const ServerProcess& plain, const std::string& route,
                                Json req, int n) {
  req["n"] = n;
  auto [st, r] = s.post(route, req);
  ASSERT_EQ(st, 200) << r;
  ASSERT_EQ(r["choices"].size(), size_t(n)) << r;
  const int seed = req["seed"].get<int>();
  for (int i = 0; i < n; ++i) {
    Json one = req;
    one["n"] = 1;
    one["seed"] = seed + i;
    Json c = plain.post(route, one).second["choices"][0];
    c["index"] = i;
    EXPECT_EQ(r["choices"][i].dump(), c.dump()) << "choice " << i;
  }
}

// A repetitive prompt, so that lookup finds its drafts in it.
const std::string kRepetitive = "In the beginning God created the heaven and the earth. And the "
                                "earth was without form. In the beginning God created the heaven";

// The greedy completion of kRepetitive drafted by lookup on `s` is `plain`'s.
void expect_lookup_equals_plain(const ServerProcess& s, const ServerProcess& plain) {
  Json req = {{"prompt", kRepetitive}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}};
  const std::string want = choices(plain.post("/v1/completions", req).second);
  req["speculative"] = "lookup";
  const double drafted = s.metric("qwen35_spec_drafted_tokens_total");
  EXPECT_EQ(choices(s.post("/v1/completions", req).second), want);
  EXPECT_GT(s.metric("qwen35_spec_drafted_tokens_total"), drafted);
}

TEST(VulkanServe, ConcurrentEqualsSoloAndMetricsShowDeviceMemory) {
  REQUIRE_DEVICE();
  ServerProcess s(kModel, on_device({"--parallel", "4", "--ctx", "512", "--step-tokens", "64"}));
  ASSERT_TRUE(s.ready()) << s.log();
  expect_concurrent_equals_solo(s, mixed_requests());
  EXPECT_GT(s.metric("qwen35_device_memory_bytes{use=\"weights\"}"), 1e6);
  EXPECT_GT(s.metric("qwen35_device_memory_bytes{use=\"kv\"}"), 0);
  EXPECT_GT(s.metric("qwen35_device_memory_bytes{use=\"states\"}"), 0);
  EXPECT_GE(s.metric("qwen35_device_memory_bytes{use=\"allocated\"}"),
            s.metric("qwen35_device_memory_bytes{use=\"weights\"}") +
                s.metric("qwen35_device_memory_bytes{use=\"kv\"}"));
  EXPECT_EQ(s.metric("qwen35_slots_used"), 0);
}

// With an image: concurrent == solo; a second turn after the image's resumes from the cache and
// is a --no-prefix-cache server's answer; MTP and lookup drafting give the plain answers; n = 2
// choices are the single seeded requests.
TEST(VulkanServe, TheEqualitiesHoldWithAnImage) {
  REQUIRE_DEVICE();
  const std::string vlm = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv-vision";
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--parallel", "2", "--ctx", "512"});
    return on_device(extra);
  };
  ServerProcess off(vlm, with({"--no-prefix-cache"}));
  ServerProcess on(vlm, with({"--cache-interval", "64", "--cache-device-mb", "16"}));
  ServerProcess mtp(vlm, with({"--no-prefix-cache", "--spec", "mtp", "--draft-tokens", "3"}));
  ASSERT_TRUE(off.ready() && on.ready() && mtp.ready()) << off.log() << on.log() << mtp.log();
  // The image, then text past the grid line at 64: the second turn resumes through the image.
  Json content = Json::array({testing::chat_image(testing::image_file("png_rgb.png")),
                              testing::text_part(long_text(4) + "What is in the picture?")});
  Json history = Json::array({{{"role", "user"}, {"content", content}}});
  auto turn = [&](int seed) {
    return Json{{"messages", history}, {"max_tokens", 5}, {"temperature", 0.8}, {"seed", seed},
                {"logprobs", true},    {"chat_template_kwargs", {{"enable_thinking", false}}}};
  };
  const Json text = {{"prompt", long_text(3)}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}};
  expect_concurrent_equals_solo(off, {{"/v1/chat/completions", turn(3)}, {"/v1/completions", text}});
  for (int t = 0; t < 2; ++t) {
    const Json req = turn(t);
    auto [s1, r1] = on.post("/v1/chat/completions", req);
    ASSERT_EQ(s1, 200) << r1;
    const std::string fresh = choices(off.post("/v1/chat/completions", req).second);
    EXPECT_EQ(choices(r1), fresh) << "turn " << t;
    EXPECT_EQ(choices(mtp.post("/v1/chat/completions", req).second), fresh) << "turn " << t;
    if (t > 0) {
      EXPECT_GT(r1["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << r1;
    }
    history.push_back(r1["choices"][0]["message"]);
    history.push_back({{"role", "user"}, {"content", "And what else?"}});
  }
  EXPECT_GT(mtp.metric("qwen35_spec_drafted_tokens_total"), 0) << mtp.log();
  // Lookup drafting after the image, and n = 2 choices of it forked on the device.
  Json lk = turn(4);
  const std::string fresh = choices(off.post("/v1/chat/completions", lk).second);
  lk["speculative"] = "lookup";
  EXPECT_EQ(choices(mtp.post("/v1/chat/completions", lk).second), fresh);
  expect_forks_equal_singles(on, off, "/v1/chat/completions", turn(5), 2);
}

// Turns of a chat, then n = 4 choices, on a server with the prefix cache (and --cache-dir), its
// snapshots in device memory (--cache-device-mb), against one without; then the cache's files
// (written from the device's snapshots) resumed by a server that names the device differently
// (vulkan:0) and has room on the device for one snapshot (the others spill to host memory), and
// skipped by the CPU's.
TEST(VulkanServe, ResumedEqualsFreshForTurnsForksAndARestart) {
  REQUIRE_DEVICE();
  TempDir d;
  const std::string dir = d.file("cache");
  const std::vector<std::string> common = {"--parallel", "4", "--ctx", "1024"};
  auto with = [&](std::vector<std::string> extra, const std::string& device = "vulkan") {
    extra.insert(extra.begin(), common.begin(), common.end());
    return on_device(extra, device);
  };
  ServerProcess off(kModel, with({"--no-prefix-cache"}));
  Json history = Json::array({{{"role", "system"}, {"content", long_text(5)}}});
  auto turn = [&](const std::string& user, int seed) {
    history.push_back({{"role", "user"}, {"content", user}});
    return Json{{"messages", history}, {"max_tokens", 5},          {"temperature", 0.8},
                {"seed", seed},        {"logprobs", true},         {"top_logprobs", 2},
                {"chat_template_kwargs", {{"enable_thinking", false}}}};
  };
  {
    ServerProcess on(kModel, with({"--cache-interval", "64", "--cache-dir", dir, "--cache-device-mb", "64"}));
    ASSERT_TRUE(on.ready() && off.ready()) << on.log() << off.log();
    int64_t cached = 0;
    for (int t = 0; t < 2; ++t) {
      const Json req = turn("Tell me of the river " + std::to_string(t) + ".", t);
      auto [s1, r1] = on.post("/v1/chat/completions", req);
      auto [s2, r2] = off.post("/v1/chat/completions", req);
      ASSERT_EQ(s1, 200) << r1;
      ASSERT_EQ(s2, 200) << r2;
      EXPECT_EQ(choices(r1), choices(r2)) << "turn " << t;
      if (t > 0) cached += r1["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
      history.push_back(r1["choices"][0]["message"]);
    }
    EXPECT_GT(cached, 0);
    EXPECT_GT(on.metric("qwen35_device_memory_bytes{use=\"snapshots\"}"), 0);
    // n = 4: the prompt computed once and forked on the device; choice i is the single request
    // with seed + i.
    expect_forks_equal_singles(on, off, "/v1/completions",
                               {{"prompt", long_text(2)}, {"max_tokens", 4}, {"temperature", 0.9},
                                {"seed", 7}, {"logprobs", 2}}, 4);
    EXPECT_EQ(on.stop(), 0);
    EXPECT_NE(on.log().find("saved "), std::string::npos) << on.log();
  }
  const Json next = turn("And where did it go?", 9);
  const std::string fresh = choices(off.post("/v1/chat/completions", next).second);
  {
    ServerProcess again(kModel, with({"--cache-interval", "64", "--cache-dir", dir, "--cache-device-mb", "0.15"},
                                     "vulkan:0"));
    ASSERT_TRUE(again.ready()) << again.log();
    EXPECT_EQ(again.log().find("loaded 0 "), std::string::npos) << again.log();
    auto [st, r] = again.post("/v1/chat/completions", next);
    ASSERT_EQ(st, 200) << r;
    EXPECT_GT(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << r;
    EXPECT_EQ(choices(r), fresh);
    // One snapshot of the bundled model (117 KiB) fits in 0.15 MiB: the rest are host memory.
    EXPECT_GT(again.metric("qwen35_device_memory_bytes{use=\"snapshots\"}"), 0);
    EXPECT_LE(again.metric("qwen35_device_memory_bytes{use=\"snapshots\"}"), 0.15 * 1048576);
  }
  // The CPU's bits are not the device's: its server resumes nothing from these files.
  ServerProcess cpu(kModel, {"--parallel", "4", "--ctx", "1024", "--cache-dir", dir, "--device", "cpu"});
  ASSERT_TRUE(cpu.ready()) << cpu.log();
  EXPECT_NE(cpu.log().find("loaded 0 "), std::string::npos) << cpu.log();
}

// A branch parting inside a first prompt, from a provisional snapshot in device memory: the
// first prompt's prefill (140 tokens) copies its state at the grid line inside it (64) into a
// device snapshot inside its step (vulkan_model_test checks that nothing crosses the bus), and
// a later prompt that parts from it at 100 tokens resumes there, with the answers of a server
// without the prefix cache. With a device budget for every snapshot (64 MiB), and for one
// (0.15 MiB; 117 KiB each): there the prompt's own snapshot at 128 moves the copy to host
// memory, from which the branch resumes.
TEST(VulkanServe, ABranchResumesFromAProvisionalSnapshotOnTheDevice) {
  REQUIRE_DEVICE();
  auto with = [](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--parallel", "2", "--ctx", "512"});
    return on_device(extra);
  };
  ServerProcess off(kModel, with({"--no-prefix-cache"}));
  ServerProcess big(kModel, with({"--cache-device-mb", "64"}));
  ServerProcess small(kModel, with({"--cache-device-mb", "0.15"}));
  ASSERT_TRUE(off.ready() && big.ready() && small.ready()) << off.log() << big.log() << small.log();
  auto prompt = [](int shared, int tail, int seed) {
    std::vector<int> p;
    for (int k = 0; k < shared; ++k) p.push_back((k * 37 + 11) % 4000);
    for (int k = 0; k < tail; ++k) p.push_back((k * 53 + seed * 7 + 5) % 4000);
    return Json{{"prompt", p}, {"max_tokens", 3}, {"temperature", 0.8}, {"seed", seed}, {"logprobs", 2}};
  };
  const Json reqs[2] = {prompt(140, 0, 1), prompt(100, 20, 2)};
  const int64_t resumed[2] = {0, 64};
  std::string fresh[2];
  for (int i = 0; i < 2; ++i) fresh[i] = choices(off.post("/v1/completions", reqs[i]).second);
  for (ServerProcess* s : {&big, &small}) {
    const bool all = s == &big;
    const std::string what = all ? "on the device" : "spilled";
    for (int i = 0; i < 2; ++i) {
      auto [st, r] = s->post("/v1/completions", reqs[i]);
      ASSERT_EQ(st, 200) << r;
      EXPECT_EQ(choices(r), fresh[i]) << "prompt " << i << ", " << what;
      EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), resumed[i])
          << "prompt " << i << ", " << what;
      if (i > 0) continue;
      // The copy at 64 (provisional) and the prompt's own snapshot at 128.
      EXPECT_EQ(s->metric("qwen35_prefix_cache_snapshots"), 2) << what;
      EXPECT_EQ(s->metric("qwen35_prefix_cache_provisional_snapshots"), 1) << what;
      EXPECT_EQ(s->metric("qwen35_prefix_cache_device_snapshots"), all ? 2 : 1) << what;
    }
    // The copy became a branch point where it was.
    EXPECT_EQ(s->metric("qwen35_prefix_cache_promoted_total"), 1) << what;
    EXPECT_EQ(s->metric("qwen35_prefix_cache_provisional_snapshots"), 0) << what;
    EXPECT_EQ(s->metric("qwen35_prefix_cache_snapshots"), 2) << what;
    EXPECT_EQ(s->metric("qwen35_prefix_cache_device_snapshots"), all ? 2 : 1) << what;
    EXPECT_LE(s->metric("qwen35_device_memory_bytes{use=\"snapshots\"}"), all ? 64 << 20 : 0.15 * 1048576);
  }
}

TEST(VulkanServe, DraftedEqualsPlainForMtpAndLookup) {
  REQUIRE_DEVICE();
  const std::vector<std::string> common = {"--parallel", "2", "--ctx", "512"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return on_device(extra);
  };
  ServerProcess plain(kModel, with({}));
  ServerProcess mtp(kModel, with({"--spec", "mtp", "--draft-tokens", "3"}));
  ServerProcess lookup(kModel, with({"--spec", "lookup", "--draft-tokens", "3"}));
  ASSERT_TRUE(plain.ready() && mtp.ready() && lookup.ready())
      << plain.log() << mtp.log() << lookup.log();
  const std::string& text = kRepetitive;
  for (const Json& req : {Json{{"prompt", text}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", 2}},
                          Json{{"prompt", text}, {"max_tokens", 8}, {"temperature", 0.7},
                               {"seed", 4}, {"logprobs", 2}}}) {
    const std::string want = choices(plain.post("/v1/completions", req).second);
    EXPECT_EQ(choices(mtp.post("/v1/completions", req).second), want) << req;
    EXPECT_EQ(choices(lookup.post("/v1/completions", req).second), want) << req;
  }
  EXPECT_GT(mtp.metric("qwen35_spec_accepted_tokens_total"), 0);
  EXPECT_GT(lookup.metric("qwen35_spec_drafted_tokens_total"), 0);
}

// A compressed KV cache (K q8_0, V turbo4) keeps the three equalities on the device: concurrent
// == solo, resumed turns and n = 4 forks == fresh, MTP and lookup drafted == plain.
TEST(VulkanServe, ACompressedCacheKeepsTheEqualities) {
  REQUIRE_DEVICE();
  const std::vector<std::string> common = {"--parallel", "4", "--ctx", "512", "--step-tokens", "64",
                                           "--kv-type", "q8_0,turbo4"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return on_device(extra);
  };
  ServerProcess on(kModel, with({"--cache-interval", "64"}));
  ServerProcess off(kModel, with({"--no-prefix-cache"}));
  ServerProcess mtp(kModel, with({"--no-prefix-cache", "--spec", "mtp", "--draft-tokens", "3"}));
  ASSERT_TRUE(on.ready() && off.ready() && mtp.ready()) << on.log() << off.log() << mtp.log();
  expect_concurrent_equals_solo(on, mixed_requests());
  Json history = Json::array({{{"role", "system"}, {"content", long_text(5)}}});
  for (int t = 0; t < 2; ++t) {
    history.push_back({{"role", "user"}, {"content", "Of the river " + std::to_string(t) + "?"}});
    const Json req = {{"messages", history}, {"max_tokens", 5}, {"temperature", 0.8}, {"seed", t},
                      {"logprobs", true}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
    auto [s1, r1] = on.post("/v1/chat/completions", req);
    ASSERT_EQ(s1, 200) << r1;
    const Json fresh = off.post("/v1/chat/completions", req).second;
    EXPECT_EQ(choices(r1), choices(fresh)) << "turn " << t;
    EXPECT_EQ(choices(mtp.post("/v1/chat/completions", req).second), choices(fresh)) << "turn " << t;
    if (t > 0) {
      EXPECT_GT(r1["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << r1;
    }
    history.push_back(r1["choices"][0]["message"]);
  }
  EXPECT_GT(mtp.metric("qwen35_spec_drafted_tokens_total"), 0);
  expect_lookup_equals_plain(mtp, off);
  expect_forks_equal_singles(on, off, "/v1/completions",
                             {{"prompt", long_text(2)}, {"max_tokens", 4}, {"temperature", 0.9},
                              {"seed", 7}, {"logprobs", 2}}, 4);
}

TEST(VulkanServe, WhatDoesNotFitIsRefusedAtStart) {
  REQUIRE_DEVICE();
  {
    ServerProcess big(kModel, on_device({"--ctx", "1000000", "--parallel", "64"}));
    EXPECT_FALSE(big.ready());
    EXPECT_NE(big.stop(), 0);
    EXPECT_NE(big.log().find("of device memory"), std::string::npos) << big.log();
    EXPECT_NE(big.log().find("lower --ctx"), std::string::npos) << big.log();
  }
  {
    ServerProcess snaps(kModel, on_device({"--cache-device-mb", "100000"}));
    EXPECT_FALSE(snaps.ready());
    EXPECT_NE(snaps.stop(), 0);
    EXPECT_NE(snaps.log().find(", snapshots "), std::string::npos) << snaps.log();
    EXPECT_NE(snaps.log().find("--cache-device-mb)"), std::string::npos) << snaps.log();
    ServerProcess cpu(kModel, {"--cache-device-mb", "1", "--device", "cpu"});
    EXPECT_FALSE(cpu.ready());
    EXPECT_NE(cpu.stop(), 0);
    EXPECT_NE(cpu.log().find("--cache-device-mb keeps snapshots in a device's memory: it needs --device vulkan"),
              std::string::npos)
        << cpu.log();
  }
  // An allocation that fails while the weights upload (memory the plan counted on): a clean
  // refusal in one line, not a crash.
  for (const char* at : {"1", "5"}) {
    setenv("QWEN35_TEST_VULKAN_FAIL_UPLOAD_AT", at, 1);
    ServerProcess oom(kModel, on_device({}));
    unsetenv("QWEN35_TEST_VULKAN_FAIL_UPLOAD_AT");
    EXPECT_FALSE(oom.ready());
    EXPECT_EQ(oom.stop(), 1) << oom.log();
    EXPECT_NE(oom.log().find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos) << oom.log();
  }
  setenv("QWEN35_TEST_VULKAN_MEMORY_MB", "2", 1);  // less than the weights
  ServerProcess small(kModel, on_device({}));
  unsetenv("QWEN35_TEST_VULKAN_MEMORY_MB");
  EXPECT_FALSE(small.ready());
  EXPECT_NE(small.stop(), 0);
  EXPECT_NE(small.log().find("has 2.0 MiB"), std::string::npos) << small.log();
}

TEST(VulkanServe, AFailedAllocationInAStepFailsOnlyItsRequest) {
  REQUIRE_DEVICE();
  const Json req = {{"prompt", long_text(2)}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 1}};
  ServerProcess fresh(kModel, on_device({"--parallel", "2", "--ctx", "512"}));
  setenv("QWEN35_TEST_VULKAN_FAIL_ALLOC_AT", "1", 1);  // the first step's first twin
  ServerProcess s(kModel, on_device({"--parallel", "2", "--ctx", "512"}));
  unsetenv("QWEN35_TEST_VULKAN_FAIL_ALLOC_AT");
  ASSERT_TRUE(s.ready() && fresh.ready()) << s.log() << fresh.log();
  auto [st, r] = s.post("/v1/completions", req);
  EXPECT_EQ(st, 500) << r;
  EXPECT_NE(r.dump().find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos) << r;
  auto [st2, r2] = s.post("/v1/completions", req);
  ASSERT_EQ(st2, 200) << r2;
  EXPECT_EQ(choices(r2), choices(fresh.post("/v1/completions", req).second));
  EXPECT_EQ(s.get("/health").first, 200);
}

TEST(VulkanServe, ALostDeviceEndsRequestsWithErrorsAndTheProcess) {
  REQUIRE_DEVICE();
  setenv("QWEN35_TEST_VULKAN_LOSE_AT", "3", 1);  // a few steps into the first request
  ServerProcess s(kModel, on_device({"--parallel", "2", "--ctx", "512"}));
  unsetenv("QWEN35_TEST_VULKAN_LOSE_AT");
  ASSERT_TRUE(s.ready()) << s.log();
  const Json openai = {{"prompt", long_text(2)}, {"max_tokens", 20}, {"temperature", 0}};
  const Json anthropic = {{"model", "qwen35-tiny-kjv"}, {"max_tokens", 20},
                          {"messages", {{{"role", "user"}, {"content", "Who made the light?"}}}}};
  // Both at once: each gets the device's line in its API's error shape (or, arriving after the
  // process began to exit, no answer at all: never a hang).
  std::pair<int, Json> a, b;
  std::thread t1([&] { a = s.post("/v1/completions", openai); });
  std::thread t2([&] { b = s.post("/v1/messages", anthropic); });
  t1.join();
  t2.join();
  for (const auto& [st, r] : {a, b}) {
    if (st == -1) continue;
    EXPECT_GE(st, 500) << r;
    EXPECT_NE(r.dump().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << r;
  }
  ASSERT_TRUE(a.first != -1 || b.first != -1);
  if (a.first != -1) {
    EXPECT_TRUE(a.second.contains("error")) << a.second;
  }
  if (b.first != -1) {
    EXPECT_EQ(b.second.value("type", ""), "error") << b.second;
  }
  // Then the process ends by itself, non-zero, saying why.
  for (int i = 0; i < 3000 && !s.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(s.stop(), 1) << s.log();
  EXPECT_NE(s.log().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << s.log();
  EXPECT_NE(s.log().find("exiting"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace qwen35
