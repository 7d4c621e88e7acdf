"""Builds the corpus, trains the byte-level BPE and writes the token streams.

    /usr/bin/python3 tools/train/prep.py --out /tmp/q35data [--bpe-vocab 4000]

Writes OUT/tokenizer.json (HF format), OUT/{train,heldout}_{kjv,fortunes,chat}.npy (uint16 token
streams, documents separated by <|endoftext|>) and OUT/prep.json (stats).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import data  # noqa: E402


GEN_PROMPT = "<|im_start|>assistant\n<think>\n"


def encode_doc(tok, doc, split_at_prompt):
    """With split_at_prompt, a conversation is tokenized in two pieces at the end of the generation
    prompt (`<|im_start|>assistant\n<think>\n`), as at inference time: the prompt is tokenized,
    then the model continues with its own tokens (`\n`, `</think>`, `\n\n`, ...). Tokenizing the
    whole string instead would merge the newlines after <think> into one `\n\n` token that an
    inference prompt never ends with. 4 in 5 conversations are split; the rest keep the whole-string
    tokenization (what a re-rendered history or an enable_thinking=false prompt gives)."""
    if split_at_prompt:
        i = doc.rfind(GEN_PROMPT)
        if i >= 0:
            j = i + len(GEN_PROMPT)
            return tok.encode(doc[:j]) + tok.encode(doc[j:])
    return tok.encode(doc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bpe-vocab", type=int, default=4000)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    train, held = data.build(a.seed)
    with open(os.path.join(a.out, "docs.json"), "w", encoding="utf-8") as f:
        json.dump({"train": train, "heldout": held}, f, ensure_ascii=False)
    # BPE training text: all training KJV and fortunes, plus 2000 conversations (so the chat
    # phrasing gets merges too) with the special tokens cut out.
    tok_split = bpe.Tokenizer([])._split
    chat_txt = [p for c in train["chat"][:2000] for p in tok_split.split(c) if p and not p.startswith("<")]
    tok = bpe.train_tokenizer(train["kjv"] + train["fortunes"] + chat_txt, a.bpe_vocab, log=print)
    print(f"bpe: {tok.n_bpe} tokens + {len(tok.added)} added ({time.time() - t0:.0f}s)")
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok.to_hf_json(), f, ensure_ascii=False, indent=1)
    eot = tok.added["<|endoftext|>"]
    stats = {"bpe_vocab": tok.n_bpe, "n_tokens": len(tok)}
    for split, d in (("train", train), ("heldout", held)):
        for k, docs in d.items():
            ids = []
            for di, doc in enumerate(docs):
                ids.extend(encode_doc(tok, doc, k == "chat" and di % 5 != 0))
                ids.append(eot)
            arr = np.asarray(ids, dtype=np.uint16)
            np.save(os.path.join(a.out, f"{split}_{k}.npy"), arr)
            chars = sum(len(x) for x in docs)
            stats[f"{split}_{k}"] = {"docs": len(docs), "chars": chars, "tokens": int(arr.size)}
            print(f"{split:8s} {k:9s} {arr.size:9d} tokens  {chars / max(1, arr.size):.2f} chars/token")
    with open(os.path.join(a.out, "prep.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
