"""Print the loss curve of a run (RUN/log.jsonl) as a Markdown table.
    /usr/bin/python3 tools/train/curve.py /tmp/q35run/log.jsonl [--every 100]"""
import argparse
import json
import math

ap = argparse.ArgumentParser()
ap.add_argument("log")
ap.add_argument("--every", type=int, default=100)
a = ap.parse_args()
recs = [json.loads(l) for l in open(a.log)]
off, prev = 0.0, 0.0                      # a resumed run restarts its clock: accumulate
for r in recs:
    if r["elapsed"] + off < prev:
        off = prev
    r["elapsed"] += off
    prev = r["elapsed"]
print("| step | tokens | train loss (mean of last 50 steps) | train MTP loss | held-out loss | held-out ppl | held-out MTP loss | elapsed |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in recs:
    if "heldout_loss" in r and (r["step"] % a.every == 0 or r is recs[-1] or r["step"] == 50):
        win = [x for x in recs if r["step"] - 50 < x["step"] <= r["step"]]
        tl = sum(x["loss"] for x in win) / len(win)
        tm = sum(x["mtp_loss"] for x in win) / len(win)
        print(f"| {r['step']} | {r['tokens'] / 1e6:.2f} M | {tl:.3f} | {tm:.3f} | {r['heldout_loss']:.3f} | "
              f"{math.exp(r['heldout_loss']):.1f} | {r['heldout_mtp_loss']:.3f} | {r['elapsed'] / 60:.0f} min |")
