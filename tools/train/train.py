"""Train the tiny Qwen3.5 model (CPU, torch 1.13, deterministic for a given seed).

    nice -n 15 /usr/bin/python3 tools/train/train.py --data /tmp/q35data --run /tmp/q35run --steps 1500

The data directory comes from prep.py. Every --ckpt-every steps RUN/ckpt.pt is rewritten
(model, optimizer, step, RNG state); rerunning the same command resumes from it.
Loss = CE(next token) + mtp_weight * CE(MTP head, token t+2).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Cfg, Qwen35Tiny, cfg_dict  # noqa: E402

SOURCES = ("kjv", "fortunes", "chat")


def load_streams(data, split):
    return {s: torch.from_numpy(np.load(os.path.join(data, f"{split}_{s}.npy")).astype(np.int64)) for s in SOURCES}


def sample_batch(streams, weights, B, T, gen):
    """B windows of T+1 tokens; each row's source drawn with `weights`."""
    w = torch.tensor([weights[s] for s in SOURCES], dtype=torch.float64)
    src = torch.multinomial(w, B, replacement=True, generator=gen)
    rows = []
    for i in range(B):
        st = streams[SOURCES[int(src[i])]]
        o = int(torch.randint(0, st.numel() - T - 1, (1,), generator=gen))
        rows.append(st[o:o + T + 1])
    return torch.stack(rows)


def heldout_windows(streams, T, per_source):
    """Fixed, non-overlapping held-out windows (deterministic): per_source from each source."""
    out = []
    for s in SOURCES:
        st = streams[s]
        for j in range(per_source):
            o = j * (T + 1)
            if o + T + 1 <= st.numel():
                out.append(st[o:o + T + 1])
    return torch.stack(out)


def losses(model, batch, mtp_weight):
    ids = batch[:, :-1]
    main, mt = model(ids)
    V = main.shape[-1]
    l_main = F.cross_entropy(main.reshape(-1, V), batch[:, 1:].reshape(-1))
    if mt is None:
        return l_main, l_main, torch.zeros(())
    l_mtp = F.cross_entropy(mt.reshape(-1, V), batch[:, 2:].reshape(-1))
    return l_main + mtp_weight * l_mtp, l_main, l_mtp


@torch.no_grad()
def evaluate(model, windows, mtp_weight, bs=8):
    model.eval()
    tm, tt, n = 0.0, 0.0, 0
    for i in range(0, windows.shape[0], bs):
        b = windows[i:i + bs]
        _, lm, lt = losses(model, b, mtp_weight)
        tm += float(lm) * b.shape[0]
        tt += float(lt) * b.shape[0]
        n += b.shape[0]
    model.train()
    return tm / n, tt / n


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--mix", default="kjv=0.5,fortunes=0.35,chat=0.15")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stop-at", type=int, default=0, help="stop (and checkpoint) after this step; the "
                    "schedule still follows --steps")
    # geometry
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--vocab", type=int, default=4096)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.run, exist_ok=True)
    weights = {k: float(v) for k, v in (kv.split("=") for kv in a.mix.split(","))}
    c = Cfg(vocab=a.vocab, hidden=a.hidden, layers=a.layers, intermediate=a.intermediate)
    model = Qwen35Tiny(c)
    model.init_weights(a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for n, p in model.named_parameters() if n.startswith("mtp."))
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed + 1000)
    train = load_streams(a.data, "train")
    held = load_streams(a.data, "heldout")
    hw = heldout_windows(held, a.seq, 4)
    step = 0
    ck_path = os.path.join(a.run, "ckpt.pt")
    log_path = os.path.join(a.run, "log.jsonl")
    tokens_done = 0
    if os.path.exists(ck_path):
        ck = torch.load(ck_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        step, tokens_done = ck["step"], ck["tokens"]
        print(f"resumed at step {step}")
    print(f"params {n_params} (mtp {n_mtp}, embedding {c.vocab * c.hidden}); "
          f"{a.batch}x{a.seq} tokens/step; {a.steps} steps", flush=True)
    with open(os.path.join(a.run, "args.json"), "w") as f:
        json.dump({"args": vars(a), "cfg": cfg_dict(c), "params": n_params, "mtp_params": n_mtp}, f, indent=1)

    def save():
        tmp = ck_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step,
                    "tokens": tokens_done, "cfg": cfg_dict(c)}, tmp)
        os.replace(tmp, ck_path)

    t0 = time.time()
    logf = open(log_path, "a")
    model.train()
    while step < a.steps:
        lr = lr_at(step, a)
        for gp in opt.param_groups:
            gp["lr"] = lr
        batch = sample_batch(train, weights, a.batch, a.seq, gen)
        loss, lm, lt = losses(model, batch, a.mtp_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_done += a.batch * a.seq
        rec = {"step": step, "loss": float(lm), "mtp_loss": float(lt), "lr": lr, "gnorm": float(gn),
               "tokens": tokens_done, "elapsed": time.time() - t0}
        if step % a.eval_every == 0 or step == a.steps:
            he, ht = evaluate(model, hw, a.mtp_weight)
            rec.update({"heldout_loss": he, "heldout_mtp_loss": ht, "heldout_ppl": math.exp(he)})
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        if step % 10 == 0 or "heldout_loss" in rec:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()), flush=True)
        if step % a.ckpt_every == 0 or step == a.steps or step == a.stop_at:
            save()
        if step == a.stop_at:
            print(f"stopped at step {step}", flush=True)
            return
    print("done", flush=True)


if __name__ == "__main__":
    main()
