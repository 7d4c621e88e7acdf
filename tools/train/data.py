"""Corpus for the tiny model: the King James Bible (Debian bible-kjv-text, public domain), the
fortune cookie files of Debian `fortunes` (fortune-mod, BSD licence), and ChatML conversations built
from the same text. Documents are split into train / held-out deterministically.

    /usr/bin/python3 tools/train/data.py --out /tmp/q35data     # writes docs.json (+ stats)
"""
import argparse
import json
import os
import random
import re
import subprocess

FORTUNE_DIR = "/usr/share/games/fortunes"
# Text-like cookie files of the Debian `fortunes` package (ascii-art, perl snippets and the
# untranslated file are left out).
FORTUNE_EXCLUDE = {"ascii-art", "translate-me", "perl"}

BOOKS = None


def read_kjv():
    """Returns [(book, chapter, [verse texts])] via the `bible` program of Debian bible-kjv."""
    out = subprocess.run(["bible", "-m", "8192", "-l", "100000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters = []
    cur = None
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^(\S.*\S) (\d+)$", line)
        if m and not line.startswith(" "):
            cur = (m.group(1), int(m.group(2)), [])
            chapters.append(cur)
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            cur[2].append(m.group(2).strip())
        else:                                  # continuation of the previous verse
            cur[2][-1] += " " + line.strip()
    return chapters


def read_fortunes():
    out = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        p = os.path.join(FORTUNE_DIR, name)
        if name.endswith((".dat", ".u8")) or name in FORTUNE_EXCLUDE or not os.path.isfile(p) or os.path.islink(p):
            continue
        with open(p, encoding="utf-8") as f:
            txt = f.read()
        for ck in txt.split("\n%\n"):
            ck = ck.strip("\n%").expandtabs(8).rstrip()
            ck = "\n".join(l.rstrip() for l in ck.split("\n"))
            if ck.strip() and len(ck) < 1200:
                out.append((name, ck))
    return out


VERSE_ASKS = ["Give me a verse from the Bible.", "Tell me a Bible verse.", "Share a verse, please.",
              "Can you quote a verse?", "I would like a verse from the King James Bible.",
              "Read me a verse.", "Give me a verse.", "Quote scripture for me.",
              "What does the Bible say?", "Say a verse from {book}.", "Give me a verse from {book}.",
              "Quote {book} {ch}:{v}.", "What is {book} {ch}:{v}?", "Recite {book} {ch}:{v}."]
FORTUNE_ASKS = ["Tell me a fortune.", "Give me a fortune cookie.", "What is my fortune?",
                "Say something wise.", "Tell me something funny.", "Give me a quote.",
                "I need some wisdom.", "Do you have a saying for me?", "Tell me a joke.",
                "Share a fortune, please.", "What does the fortune cookie say?", "Cheer me up."]
GREETINGS = [("Hello!", "Hello! Ask me for a verse or a fortune."),
             ("Hi", "Hi! Would you like a verse from the Bible or a fortune?"),
             ("Who are you?", "I am a tiny Qwen3.5 model trained on the King James Bible and fortune cookies."),
             ("What can you do?", "I can share a verse from the King James Bible or tell you a fortune."),
             ("Thank you.", "You are welcome."),
             ("Goodbye.", "Goodbye, and peace be with you.")]
SYSTEMS = ["You are a helpful assistant.", "You are a tiny assistant that shares verses and fortunes."]


def render_chat(msgs):
    """The Qwen3.5 chat template for plain text turns: the final assistant turn (after the last user
    query) carries an empty think block, exactly as the template renders it."""
    s = ""
    for role, content in msgs:
        if role == "assistant":
            s += "<|im_start|>assistant\n<think>\n\n</think>\n\n" + content + "<|im_end|>\n"
        else:
            s += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n"
    return s


def make_chats(verses, fortunes, n, rng):
    """verses: [(book, ch, v, text)], fortunes: [text]."""
    chats = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.15:
            msgs.append(("system", rng.choice(SYSTEMS)))
        r = rng.random()
        if r < 0.47:
            book, ch, v, text = rng.choice(verses)
            ask = rng.choice(VERSE_ASKS).format(book=book, ch=ch, v=v)
            ans = text + (f" ({book} {ch}:{v})" if rng.random() < 0.7 else "")
            msgs += [("user", ask), ("assistant", ans)]
        elif r < 0.94:
            msgs += [("user", rng.choice(FORTUNE_ASKS)), ("assistant", rng.choice(fortunes))]
        else:
            q, a = rng.choice(GREETINGS)
            msgs += [("user", q), ("assistant", a)]
        chats.append(render_chat(msgs))
    return chats


def build(seed=1234, heldout_every=40):
    rng = random.Random(seed)
    kjv = read_kjv()
    fort = read_fortunes()
    train, held = {"kjv": [], "fortunes": [], "chat": []}, {"kjv": [], "fortunes": [], "chat": []}
    tr_verses, he_verses = [], []
    for i, (book, ch, verses) in enumerate(kjv):
        doc = f"{book} {ch}\n\n" + "\n".join(verses) + "\n"
        is_held = (i % heldout_every) == heldout_every // 2
        (held if is_held else train)["kjv"].append(doc)
        for v, t in enumerate(verses, 1):
            (he_verses if is_held else tr_verses).append((book, ch, v, t))
    tr_f, he_f = [], []
    for i, (_name, ck) in enumerate(fort):
        is_held = (i % heldout_every) == heldout_every // 2
        (he_f if is_held else tr_f).append(ck)
        (held if is_held else train)["fortunes"].append(ck + "\n")
    train["chat"] = make_chats(tr_verses, tr_f, 30000, rng)
    held["chat"] = make_chats(he_verses, he_f, 300, rng)
    return train, held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train, held = build(a.seed)
    with open(os.path.join(a.out, "docs.json"), "w", encoding="utf-8") as f:
        json.dump({"train": train, "heldout": held}, f, ensure_ascii=False)
    for split, d in (("train", train), ("heldout", held)):
        for k, v in d.items():
            print(f"{split:8s} {k:9s} {len(v):6d} docs {sum(len(x) for x in v) / 1e6:7.2f} M chars")


if __name__ == "__main__":
    main()
