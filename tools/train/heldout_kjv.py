"""Writes the held-out KJV chapters (every 40th, i % 40 == 20: the ones the bundled model never
trained on) as one text file, each a document as data.py builds it, for measurements on
held-out text such as `qwen35 logits --kl-text` (docs/benchmarks.md).

    /usr/bin/python3 tools/train/heldout_kjv.py /tmp/kjv_heldout.txt

With --train-prefix K, the first K training chapters come first (context the model has seen),
then every held-out chapter: a text longer than the held-out chapters alone, for depths past
them with the measured window still held-out (the prefix's length in tokens is the caller's
to check).
"""
import argparse

import data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train-prefix", type=int, default=0, metavar="K",
                    help="the first K training chapters before the held-out ones")
    args = ap.parse_args()
    doc = lambda book, ch, verses: f"{book} {ch}\n\n" + "\n".join(verses) + "\n"
    chapters = list(enumerate(data.read_kjv()))
    train = [doc(*c) for i, c in chapters if i % 40 != 20][:args.train_prefix]
    held = [doc(*c) for i, c in chapters if i % 40 == 20]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(train + held))
    print(f"{len(train)} training chapters, then {len(held)} held-out chapters")


if __name__ == "__main__":
    main()
