// concurrent == solo (docs/design.md §6, issue 6): a request's tokens and logprobs are bit-identical
// whether it runs alone or among 7 others of different lengths that arrive at different times,
// for greedy and for seeded sampling. A small step budget makes long prompts prefill in several
// steps while other requests decode.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

struct Outcome {
  int status = 0;
  Json ids, logprobs;
  std::string text, finish;
};

Outcome run(const ServerProcess& s, const Json& req) {
  auto [st, r] = s.post("/v1/completions", req);
  Outcome o;
  o.status = st;
  if (st != 200) {
    o.text = r.dump();
    return o;
  }
  o.ids = r["choices"][0]["token_ids"];
  o.logprobs = r["choices"][0]["logprobs"];
  o.text = r["choices"][0]["text"];
  o.finish = r["choices"][0]["finish_reason"];
  return o;
}

std::vector<Json> requests(bool seeded) {
  const int lengths[8] = {5, 70, 130, 1, 200, 64, 17, 129};
  const int gen[8] = {24, 9, 30, 16, 12, 20, 28, 7};
  std::vector<Json> out;
  for (int i = 0; i < 8; ++i) {
    std::vector<int> prompt;
    for (int k = 0; k < lengths[i]; ++k) prompt.push_back((k * 37 + i * 101 + 11) % 1000);
    Json r = {{"prompt", prompt},
              {"max_tokens", gen[i]},
              {"ignore_eos", true},
              {"logprobs", 3},
              {"return_token_ids", true}};
    if (seeded) {
      r["temperature"] = 0.9;
      r["top_p"] = 0.95;
      r["seed"] = 1000 + i;
    } else {
      r["temperature"] = 0;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// (seeded, fast): the fast mode (int8 activations, on an MLX 4-bit checkpoint) keeps the
// equality too.
class ExactnessTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(ExactnessTest, ConcurrentEqualsSolo) {
  const auto [seeded, fast] = GetParam();
  TempDir d;
  auto r = testing::run_qwen35("synth --preset tiny --quiet" + std::string(fast ? " --format mlx --bits 4" : "") +
                               " --out " + d.file("m"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> flags = {"--parallel", "8", "--ctx", "512", "--step-tokens", "96"};
  if (fast) flags.push_back("--fast");
  ServerProcess srv(d.file("m"), flags);
  ASSERT_TRUE(srv.ready()) << srv.log();
  const auto reqs = requests(seeded);
  std::vector<Outcome> solo, together(reqs.size());
  for (const auto& q : reqs) {
    solo.push_back(run(srv, q));
    ASSERT_EQ(solo.back().status, 200) << solo.back().text;
  }
  const double steps0 = srv.metric("qwen35_engine_steps_total");
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(7 * ((i * 5) % 8)));
      together[i] = run(srv, reqs[i]);
    });
  for (auto& t : threads) t.join();
  // The requests really shared steps: far fewer steps than running them one by one.
  const double steps = srv.metric("qwen35_engine_steps_total") - steps0;
  EXPECT_LT(steps, steps0 * 0.8) << "solo " << steps0 << " steps, together " << steps;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(together[i].status, 200) << together[i].text;
    EXPECT_EQ(together[i].ids, solo[i].ids) << "request " << i;
    EXPECT_EQ(together[i].ids.size(), reqs[i]["max_tokens"].get<size_t>());
    // Logprobs compared as the JSON numbers the server printed: equal text, equal bits.
    EXPECT_EQ(together[i].logprobs.dump(), solo[i].logprobs.dump()) << "request " << i;
    EXPECT_EQ(together[i].text, solo[i].text);
  }
  EXPECT_EQ(srv.stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSeeded, ExactnessTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "seeded" : "greedy") +
                                  (std::get<1>(info.param) ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace qwen35
