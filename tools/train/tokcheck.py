"""Compare this trainer's tokenizer (bpe.py) with the Hugging Face `tokenizers` library on held-out
text and edge cases. Needs node and `npm install @anush008/tokenizers` in a scratch directory:

    (cd /tmp/hftok && npm init -y && npm install @anush008/tokenizers)
    /usr/bin/python3 tools/train/tokcheck.py --tokenizer models/qwen35-tiny-kjv/tokenizer.json \
        --data /tmp/q35data --node-modules /tmp/hftok/node_modules
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

EDGE = ["Hello, world! It's 2024; they'll say we've 12345 apples.", "  leading and trailing spaces   ",
        "tabs\tand\r\nCRLF\n\n\nnewlines", "caf\u00e9 na\u00efve e\u0301 \u00c5ngstr\u00f6m", "\u4f60\u597d\u4e16\u754c",
        "emoji \U0001F600\U0001F44D", "I'M SHOUTING, DON'T", "x\u00b2 + \u00bd \u2167 \u0663", "--  -- ... ?!",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nyes<|im_end|>",
        "<tool_call>\n<function=f>\n</function>\n</tool_call><|endoftext|>", "  \n  \n", "a\u00a0b\u2003c", ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--node-modules", default="/tmp/hftok/node_modules")
    a = ap.parse_args()
    tok = bpe.Tokenizer.from_hf_json(a.tokenizer)
    with open(os.path.join(a.data, "docs.json"), encoding="utf-8") as f:
        docs = json.load(f)["heldout"]
    texts = EDGE + [d for k in ("kjv", "fortunes", "chat") for d in docs[k]]
    tmp = tempfile.mkdtemp()
    inp, outp = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
    with open(inp, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    env = dict(os.environ, NODE_PATH=a.node_modules)
    subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokcheck.js"), a.tokenizer,
                    inp, outp], check=True, env=env)
    with open(outp, encoding="utf-8") as f:
        hf = json.load(f)
    bad, n_tok, n_dec_bad = 0, 0, 0
    for t, r in zip(texts, hf["out"]):
        mine = tok.encode(t)
        n_tok += len(mine)
        if mine != r["ids"]:
            bad += 1
            if bad <= 5:
                print("MISMATCH", repr(t[:80]), mine[:20], r["ids"][:20])
        if tok.decode(mine) != r["decoded"]:
            n_dec_bad += 1
    print(f"{len(texts)} texts, {n_tok} tokens: {len(texts) - bad} identical encodings, {bad} differ; "
          f"decode differs on {n_dec_bad}; HF vocab size with added tokens {hf['vocab']} (ours {len(tok)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
