"""Trains the vision demo: a tiny Qwen3.5 vision tower on the bundled text model, on images the
trainer draws (shapes.py), with some of the text model's own data mixed in.

    /usr/bin/python3 tools/train/train_vision.py --base models/qwen35-tiny-kjv --data DATA --run RUN

DATA is prep.py's output (the text streams). Each step: a batch of images drawn at one size
(--images 64: 64x64, the first stage; varied: shapes.drawn_size, then brought to the size the
engine's processor gives them) with their prompts (loss on the assistant's answer only), plus a batch of text windows (loss on every token,
main + MTP, as train.py), so the text model keeps its text skills. The tower learns at --lr, the
text model at --lm-lr. With --init DIR the model starts from an exported demo (the second stage
starts from the first's export) instead of --base and a fresh tower. RUN/ckpt.pt is written every
--ckpt-every steps and the same command resumes.

A prompt is what the engine renders from the Qwen3.5 chat template for a user message whose
content is the image then a question, with the generation prompt:
    <|im_start|>user\\n<|vision_start|><|image_pad|>...<|vision_end|>QUESTION<|im_end|>\\n
    <|im_start|>assistant\\n<think>\\n
followed by the answer as the template renders a last assistant turn: \\n</think>\\n\\nANSWER<|im_end|>.
One in five examples is tokenized as one string instead (the enable_thinking=false prompt, whose
`<think>\\n\\n</think>\\n\\n` has one `\\n\\n` token), as data.py does for text.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import shapes  # noqa: E402
from evaluate import load_model  # noqa: E402
from train import load_streams, sample_batch  # noqa: E402
from vision_model import (Qwen35TinyVision, VisionCfg, load_vision_model, patch_rows, positions_for,  # noqa: E402
                          vision_cfg_dict)

IMAGE_PAD = "<|image_pad|>"
HELDOUT_SEED = 7777  # the evaluation's images; training seeds must differ
# The training log's held-out check (seed HELDOUT_SEED + 1): drawn (height, width) sizes, 32
# images each. Stage 1 checks 64x64 alone.
CHECK_SIZES = {"64": ((64, 64),) * 3, "varied": ((64, 64), (96, 96), (72, 160), (192, 64))}


def user_prefix(question):
    return ("<|im_start|>user\n<|vision_start|>" + IMAGE_PAD + "<|vision_end|>" + question +
            "<|im_end|>\n<|im_start|>assistant\n")


def expand(tok, ids, n_image_tokens):
    pad = tok.added[IMAGE_PAD]
    out = []
    for t in ids:
        out.extend([pad] * n_image_tokens if t == pad else [t])
    return out


def prompt_ids(tok, question, n_image_tokens):
    """The generation prompt, as the engine tokenizes the rendered template (ends `<think>\\n`)."""
    return expand(tok, tok.encode(user_prefix(question) + "<think>\n"), n_image_tokens)


def example_ids(tok, question, ans, n_image_tokens, whole):
    """(ids, index of the first predicted token): predictions start after `<think>`."""
    if whole:
        ids = tok.encode(user_prefix(question) + "<think>\n\n</think>\n\n" + ans + "<|im_end|>")
    else:
        ids = tok.encode(user_prefix(question) + "<think>\n") + tok.encode("\n</think>\n\n" + ans + "<|im_end|>")
    ids = expand(tok, ids, n_image_tokens)
    return ids, ids.index(tok.added["<think>"]) + 1


def image_batch(tok, rng, batch, image_token_id, size=None, whole_frac=0.2, varied=False, square_frac=0.25):
    """B examples drawn at one size (`size`, else shapes.drawn_size if varied, else 64x64), each
    brought to the processor's size -> (ids [B, T], labels [B, T], rows, gh, gw, positions, info)."""
    if size is None:
        size = shapes.drawn_size(rng, square_frac) if varied else shapes.SIZES[rng.integers(len(shapes.SIZES))]
    ph, pw = shapes.processed_size(*size)
    n_tok = (ph // 32) * (pw // 32)
    imgs, seqs, info = [], [], []
    for _ in range(batch):
        img, colour, shape, q = shapes.sample(rng, size)
        img = shapes.to_processor(img)
        ids, start = example_ids(tok, q, shapes.answer(colour, shape), n_tok, rng.random() < whole_frac)
        imgs.append(img)
        seqs.append((ids, start))
        info.append((colour, shape))
    T = max(len(s) for s, _ in seqs)
    pad = tok.added["<|endoftext|>"]
    ids = torch.full((batch, T), pad, dtype=torch.long)
    labels = torch.full((batch, T), -100, dtype=torch.long)
    for b, (s, start) in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        labels[b, start - 1:len(s) - 1] = torch.tensor(s[start:])
    rows, gh, gw = patch_rows(np.stack(imgs), VisionCfg())
    positions = positions_for(ids.tolist(), (1, gh, gw), image_token_id)
    return ids, labels, rows, gh, gw, positions, info


def build_model(base_dir, vc, seed, init=None):
    if init:
        m, tok, _ = load_vision_model(init)
        m.train()
        return m, m.c, tok
    text, c = load_model(base_dir)
    tok = bpe.Tokenizer.from_hf_json(os.path.join(base_dir, "tokenizer.json"))
    m = Qwen35TinyVision(c, vc, tok.added[IMAGE_PAD])
    missing, unexpected = m.load_state_dict(text.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("model.visual.") for k in missing), (missing, unexpected)
    m.model.visual.init_weights(seed)
    return m, c, tok


def image_loss(m, batch, probe=None, probe_weight=0.5):
    """The answer's loss; with `probe` (a Linear from the text width to colours + shapes), plus
    the probe's classification loss on the mean of the image's tower tokens: a direct signal
    that speeds up the tower's learning of shapes (the probe is not part of the model)."""
    ids, labels, rows, gh, gw, positions, info = batch
    tokens = m.model.visual(rows, gh, gw)
    h = m.trunk_images(ids, rows, gh, gw, positions, tokens)
    logits = m.logits(h)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    if probe is not None:
        out = probe(tokens.mean(1))
        nc = len(shapes.COLOURS)
        colour = torch.tensor([list(shapes.COLOURS).index(c) for c, _ in info])
        shape = torch.tensor([shapes.SHAPES.index(s) for _, s in info])
        loss = loss + probe_weight * (F.cross_entropy(out[:, :nc], colour) + F.cross_entropy(out[:, nc:], shape))
    return loss, logits


def text_loss(m, batch, mtp_weight=0.3):
    main, mt = m(batch[:, :-1])
    V = main.shape[-1]
    loss = F.cross_entropy(main.reshape(-1, V), batch[:, 1:].reshape(-1))
    if mt is not None:
        loss = loss + mtp_weight * F.cross_entropy(mt.reshape(-1, V), batch[:, 2:].reshape(-1))
    return loss


@torch.no_grad()
def teacher_forced_exact(m, tok, sizes, seed):
    """Share of held-out images (32 drawn at each size) whose whole answer is the argmax at every
    step (= greedy output), in all and per size."""
    m.eval()
    rng = np.random.default_rng(seed)
    ok, per_size = 0, []
    for size in sizes:
        batch = image_batch(tok, rng, 32, m.image_token_id, size, whole_frac=0.0)
        _, logits = image_loss(m, batch)
        labels = batch[1]
        good = ((logits.argmax(-1) == labels) | (labels == -100)).all(-1)
        ok += int(good.sum())
        per_size.append(int(good.sum()) / 32)
    m.train()
    return ok / (32 * len(sizes)), per_size


def lr_scale(step, warmup, steps, floor=0.1):
    if step < warmup:
        return (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, steps - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the text model's HF directory")
    ap.add_argument("--data", required=True, help="prep.py's output (text streams)")
    ap.add_argument("--run", required=True)
    ap.add_argument("--init", help="an exported demo to start from (the second stage)")
    ap.add_argument("--images", choices=sorted(CHECK_SIZES), default="varied",
                    help="64: 64x64 images (the first stage); varied: sizes and aspect ratios")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--square-frac", type=float, default=0.25,
                    help="with --images varied: the share of steps drawn square")
    ap.add_argument("--stop-at", type=int, help="stop after this step's checkpoint (resume later)")
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--text-batch", type=int, default=4)
    ap.add_argument("--text-seq", type=int, default=128)
    ap.add_argument("--text-weight", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--probe-weight", type=float, default=0.5,
                    help="the training-only linear probe's loss weight (0: none)")
    ap.add_argument("--lm-lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--vision-hidden", type=int, default=64)
    a = ap.parse_args()
    assert a.seed != HELDOUT_SEED
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.run, exist_ok=True)
    vc = VisionCfg(depth=a.depth, hidden=a.vision_hidden, intermediate=4 * a.vision_hidden)
    m, c, tok = build_model(a.base, vc, a.seed, a.init)
    vc = m.vc
    probe = torch.nn.Linear(c.hidden, len(shapes.COLOURS) + len(shapes.SHAPES))
    groups = [{"params": list(probe.parameters()), "weight_decay": 0.0, "base_lr": a.lr}]
    for prefix, lr in (("model.visual.", a.lr), ("", a.lm_lr)):
        ps = [(n, p) for n, p in m.named_parameters() if n.startswith(prefix) and
              (prefix or not n.startswith("model.visual."))]
        groups.append({"params": [p for n, p in ps if p.ndim >= 2], "weight_decay": 0.1, "base_lr": lr})
        groups.append({"params": [p for n, p in ps if p.ndim < 2], "weight_decay": 0.0, "base_lr": lr})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 1000)
    streams = load_streams(a.data, "train")
    mix = {"kjv": 0.4, "fortunes": 0.3, "chat": 0.3}
    ck_path = os.path.join(a.run, "ckpt.pt")
    step = 0
    if os.path.exists(ck_path):
        ck = torch.load(ck_path)
        m.load_state_dict(ck["model"])
        probe.load_state_dict(ck["probe"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        rng.bit_generator.state = ck["rng"]
        step = ck["step"]
        print(f"resumed at step {step}", flush=True)
    n_vis = sum(p.numel() for n, p in m.named_parameters() if n.startswith("model.visual."))
    print(f"tower params {n_vis}; {a.batch} images + {a.text_batch}x{a.text_seq} text tokens per step", flush=True)
    with open(os.path.join(a.run, "args.json"), "w") as f:
        json.dump({"args": vars(a), "vision_cfg": vision_cfg_dict(vc), "tower_params": n_vis}, f, indent=1)

    def save():
        torch.save({"model": m.state_dict(), "probe": probe.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                    "rng": rng.bit_generator.state, "step": step, "vision_cfg": vision_cfg_dict(vc)},
                   ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)

    t0 = time.time()
    logf = open(os.path.join(a.run, "log.jsonl"), "a")
    m.train()
    end = min(a.steps, a.stop_at or a.steps)
    while step < end:
        scale = lr_scale(step, a.warmup, a.steps)
        for gp in opt.param_groups:
            gp["lr"] = gp["base_lr"] * scale
        li, _ = image_loss(m, image_batch(tok, rng, a.batch, m.image_token_id, varied=a.images == "varied",
                                       square_frac=a.square_frac),
                           probe if a.probe_weight > 0 else None, a.probe_weight)
        lt = text_loss(m, sample_batch(streams, mix, a.text_batch, a.text_seq, gen))
        opt.zero_grad(set_to_none=True)
        (li + a.text_weight * lt).backward()
        gn = torch.nn.utils.clip_grad_norm_(list(m.parameters()) + list(probe.parameters()), 1.0)
        opt.step()
        step += 1
        rec = {"step": step, "image_loss": float(li), "text_loss": float(lt), "gnorm": float(gn),
               "lr_scale": scale, "elapsed": time.time() - t0}
        if step % a.eval_every == 0 or step == a.steps:
            rec["heldout_exact"], per_size = teacher_forced_exact(m, tok, CHECK_SIZES[a.images], HELDOUT_SEED + 1)
            if a.images == "varied":
                rec["heldout_by_size"] = per_size
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        if step % 10 == 0 or "heldout_exact" in rec:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()), flush=True)
        if step % a.ckpt_every == 0 or step == end:
            save()
    print("done", flush=True)


if __name__ == "__main__":
    main()
