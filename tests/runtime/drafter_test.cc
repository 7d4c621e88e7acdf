// Prompt lookup (runtime/drafter.h): the longest recurring suffix, its latest earlier
// occurrence, at most `max` tokens, nothing when no suffix of 2+ tokens recurs.
#include "runtime/drafter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace qwen35::runtime {
namespace {

std::vector<int32_t> draft(const std::vector<int32_t>& ctx, int64_t max) {
  std::vector<int32_t> out = {99};  // cleared by the call
  lookup_draft(ctx, max, &out);
  return out;
}

TEST(LookupDraft, CopiesWhatFollowedTheLatestOccurrenceOfTheLongestSuffix) {
  // Suffix 3 4: seen at 2 (followed by 5 6 7) and at 7 (followed by 8 9); the latest wins.
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 7, 3, 4, 8, 9, 3, 4}, 2), (std::vector<int32_t>{8, 9}));
  // The longest suffix first: 2 3 4 matches only at 1, though 3 4 recurs later.
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 0, 3, 4, 7, 2, 3, 4}, 3), (std::vector<int32_t>{5, 6, 0}));
  // Fewer than max when the context ends; a periodic context continues its period.
  EXPECT_EQ(draft({5, 6, 7, 5, 6}, 4), (std::vector<int32_t>{7, 5, 6}));
  EXPECT_EQ(draft({1, 1, 1, 1}, 3), (std::vector<int32_t>{1}));
}

TEST(LookupDraft, NothingWithoutARecurringSuffix) {
  EXPECT_TRUE(draft({1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(draft({1, 2, 9, 2}, 4).empty());  // one token recurring is not enough
  EXPECT_TRUE(draft({}, 4).empty());
  EXPECT_TRUE(draft({7}, 4).empty());
  EXPECT_TRUE(draft({1, 2, 1, 2}, 0).empty());
}

TEST(DraftLength, DraftsWhileAcceptancePaysAndProbesOtherwise) {
  DraftLength d;
  EXPECT_EQ(d.next(4), 4);  // optimistic at first
  EXPECT_EQ(d.next(2), 2);  // never more than asked
  EXPECT_EQ(d.next(0), 0);
  // Position 3 always rejected: after a few steps two are drafted (plus a probe now and then).
  for (int i = 0; i < 6; ++i) d.update(4, 2);
  std::vector<int64_t> ks;
  for (int i = 0; i < DraftLength::kProbeInterval; ++i) ks.push_back(d.next(4));
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 2), DraftLength::kProbeInterval - 1);
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 3), 1);
  // A rejection at position 1 is no evidence about position 3: its rate does not move.
  DraftLength e;
  for (int i = 0; i < 20; ++i) e.update(3, 0);
  for (int i = 0; i < 20; ++i) e.update(1, 1);
  EXPECT_EQ(e.next(3), 3);
  // Everything rejected: no drafts, then one probe every kProbeInterval steps; accepted probes
  // bring drafting back.
  DraftLength f;
  for (int i = 0; i < 6; ++i) f.update(2, 0);
  ks.clear();
  for (int i = 0; i < 2 * DraftLength::kProbeInterval; ++i) ks.push_back(f.next(4));
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 0), 2 * DraftLength::kProbeInterval - 2) << ks.size();
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 1), 2);
  for (int i = 0; i < 8; ++i) f.update(1, 1);
  EXPECT_GE(f.next(4), 1);
  // A step without drafts (lookup found nothing) changes nothing.
  DraftLength g;
  for (int i = 0; i < 20; ++i) g.update(0, 0);
  EXPECT_EQ(g.next(3), 3);
}

TEST(SpecMethod, NamesRoundTrip) {
  for (auto m : {SpecMethod::kOff, SpecMethod::kLookup, SpecMethod::kMtp})
    EXPECT_EQ(parse_spec_method(spec_method_name(m)), m);
  EXPECT_FALSE(parse_spec_method("ngram").has_value());
}

}  // namespace
}  // namespace qwen35::runtime
