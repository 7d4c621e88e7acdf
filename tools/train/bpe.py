"""Byte-level BPE for the tiny Qwen3.5 model: training, encoding, decoding, and the
Hugging Face tokenizer.json writer.

Pre-tokenization follows the Qwen3.5 Split regex

    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

Python's `re` has no \\p{..} classes, so for training-time use the classes are expanded into
explicit code-point ranges computed from `unicodedata` categories (L* letters, M* marks, N* numbers).
The tokenizer.json that is written carries the real regex.
"""
import json
import re
import sys
import unicodedata
from collections import Counter, defaultdict

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The Qwen3.5 added tokens, in id order, with their `special` flags (ids follow the BPE vocab).
ADDED_TOKENS = (
    [(t, True) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                         "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                         "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                         "<|image_pad|>", "<|video_pad|>"]]
    + [(t, False) for t in ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                            "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                            "<tool_response>", "</tool_response>", "<think>", "</think>"]]
    + [(t, True) for t in ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
                           "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]]
)


def bytes_to_unicode():
    """The GPT-2 byte -> printable character table used by ByteLevel (order = id order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


_BS, _CS = bytes_to_unicode()
BYTE_TO_CHAR = {b: c for b, c in zip(_BS, _CS)}
CHAR_TO_BYTE = {c: b for b, c in zip(_BS, _CS)}


def _ranges(pred):
    out, start, prev = [], None, None
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            ok = False
        else:
            ok = pred(unicodedata.category(chr(cp)))
        if ok and start is None:
            start = cp
        if not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return "".join(re.escape(chr(a)) if a == b else re.escape(chr(a)) + "-" + re.escape(chr(b)) for a, b in out)


_PY_REGEX = None


def python_regex():
    """The Qwen3.5 regex with \\p{L}, \\p{M}, \\p{N} expanded for Python's `re`."""
    global _PY_REGEX
    if _PY_REGEX is None:
        L = _ranges(lambda c: c.startswith("L"))
        M = _ranges(lambda c: c.startswith("M"))
        N = _ranges(lambda c: c.startswith("N"))
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n" + L + N + r"]?[" + L + M + r"]+|[" + N + r"]|"
               r" ?[^\s" + L + M + N + r"]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
        _PY_REGEX = re.compile(pat)
    return _PY_REGEX


def pretokenize(text):
    """NFC, then the Split regex (Isolated), then ByteLevel mapping. Returns a list of strings."""
    text = unicodedata.normalize("NFC", text)
    return ["".join(BYTE_TO_CHAR[b] for b in m.encode("utf-8")) for m in python_regex().findall(text)]


def train_bpe(word_counts, n_merges, log=None):
    """Classic BPE on a {byte-level word: count} dict. The most frequent pair wins; ties go to the
    lexicographically smallest pair, so training is deterministic. Returns [(a, b), ...]."""
    import heapq
    words = [list(w) for w in word_counts]
    counts = [word_counts[w] for w in word_counts]
    pair_count = Counter()
    where = defaultdict(set)
    for wi, syms in enumerate(words):
        c = counts[wi]
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += c
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc:
            continue                      # stale entry
        cnt = -negc
        if cnt < 2:
            break
        a, b = pair
        merged = a + b
        merges.append(pair)
        touched = set()
        for wi in list(where.get(pair, ())):
            syms = words[wi]
            c = counts[wi]
            for p in zip(syms, syms[1:]):
                pair_count[p] -= c
                if pair_count[p] <= 0:
                    del pair_count[p]
                where[p].discard(wi)
                touched.add(p)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_count[p] += c
                where[p].add(wi)
                touched.add(p)
        where.pop(pair, None)
        for p in touched:
            if p in pair_count:
                heapq.heappush(heap, (-pair_count[p], p))
        if log and len(merges) % 500 == 0:
            log(f"  merge {len(merges)}: {pair!r} x{cnt}")
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.vocab = {}
        for c in _CS:
            self.vocab[c] = len(self.vocab)
        for a, b in self.merges:
            if a + b not in self.vocab:
                self.vocab[a + b] = len(self.vocab)
        self.n_bpe = len(self.vocab)
        self.added = {}
        for t, _special in ADDED_TOKENS:
            self.added[t] = self.n_bpe + len(self.added)
        self.id_to_tok = {i: t for t, i in self.vocab.items()}
        for t, i in self.added.items():
            self.id_to_tok[i] = t
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self._cache = {}
        self._split = re.compile("(" + "|".join(re.escape(t) for t, _ in ADDED_TOKENS) + ")")

    def __len__(self):
        return self.n_bpe + len(self.added)

    def token_id(self, t):
        return self.added[t] if t in self.added else self.vocab[t]

    def _bpe(self, word):
        r = self._cache.get(word)
        if r is not None:
            return r
        syms = list(word)
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                rk = self.rank.get((syms[i], syms[i + 1]))
                if rk is not None and (best is None or rk < best):
                    best, bi = rk, i
            if best is None:
                break
            a, b = self.merges[best]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        ids = [self.vocab[s] for s in syms]
        self._cache[word] = ids
        return ids

    def encode(self, text, allow_special=True):
        ids = []
        parts = self._split.split(text) if allow_special else [text]
        for part in parts:
            if not part:
                continue
            if allow_special and part in self.added:
                ids.append(self.added[part])
                continue
            for w in pretokenize(part):
                ids.extend(self._bpe(w))
        return ids

    def decode(self, ids, skip_special=False):
        special = {t for t, s in ADDED_TOKENS if s}
        out, buf = [], []
        for i in ids:
            t = self.id_to_tok.get(int(i))
            if t is None:
                continue
            if t in self.added:
                if buf:
                    out.append(bytes(buf).decode("utf-8", errors="replace"))
                    buf = []
                if not (skip_special and t in special):
                    out.append(t)
            else:
                buf.extend(CHAR_TO_BYTE[c] for c in t)
        if buf:
            out.append(bytes(buf).decode("utf-8", errors="replace"))
        return "".join(out)

    # ------------------------------------------------------------------ files
    def to_hf_json(self):
        bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": self.added[t], "content": t, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": s} for t, s in ADDED_TOKENS],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False},
                dict(bl)]},
            "post_processor": dict(bl),
            "decoder": dict(bl),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": self.vocab, "merges": [list(m) for m in self.merges]},
        }

    def save_merges(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump([list(m) for m in self.merges], f, ensure_ascii=False)

    @classmethod
    def load_merges(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    @classmethod
    def from_hf_json(cls, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        return cls(j["model"]["merges"])


def train_tokenizer(texts, vocab_size, log=None):
    """texts: iterable of plain strings (no special tokens). vocab_size counts the BPE vocab only."""
    wc = Counter()
    for t in texts:
        wc.update(pretokenize(t))
    if log:
        log(f"bpe: {len(wc)} distinct pre-tokens, {sum(wc.values())} total")
    merges = train_bpe(wc, vocab_size - 256, log)
    tok = Tokenizer(merges)
    # merges that produce an existing string do not add a vocab entry; top up until the size is reached
    extra = vocab_size - tok.n_bpe
    if extra > 0:
        merges = train_bpe(wc, vocab_size - 256 + extra, log)
        tok = Tokenizer(merges)
    return tok


if __name__ == "__main__":
    tok = Tokenizer.from_hf_json(sys.argv[1])
    s = sys.stdin.read()
    print(tok.encode(s))
