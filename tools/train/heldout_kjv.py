"""Writes the held-out KJV chapters (every 40th, i % 40 == 20: the ones the bundled model never
trained on) as one text file, each a document as data.py builds it, for measurements on
held-out text such as `qwen35 logits --kl-text` (docs/benchmarks.md).

    /usr/bin/python3 tools/train/heldout_kjv.py /tmp/kjv_heldout.txt
"""
import sys

import data


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: heldout_kjv.py OUT.txt")
    docs = [f"{book} {ch}\n\n" + "\n".join(verses) + "\n"
            for i, (book, ch, verses) in enumerate(data.read_kjv()) if i % 40 == 20]
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write("\n".join(docs))
    print(f"{len(docs)} chapters")


if __name__ == "__main__":
    main()
