"""Evaluate an exported checkpoint: trainer vs oracle vs engine, perplexity, MTP agreement, samples.

    /usr/bin/python3 tools/train/evaluate.py --model models/qwen35-tiny-kjv --data /tmp/q35data \
        [--engine build/qwen35] --oracle PATH/qwen35_ref.py [--json out.json]

The trainer's model is rebuilt from the exported bf16 tensors (so all three run the same weights)
and run in float32.
  * oracle: qwen35_ref.py --dtype float32 on held-out tokens; max |logit difference| vs the trainer.
  * perplexity: held-out windows (kjv, fortunes, chat), trainer vs `qwen35 logits` on the same tokens.
  * MTP: top-1 of the MTP head at t (from h_t and x_{t+1}) vs the main head's argmax at t+1, on
    held-out text and along greedy generations (the acceptance rate of greedy speculative decoding).
  * samples: greedy and sampled generations, plain text and chat.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
from export import read_safetensors  # noqa: E402
from model import Cfg, Qwen35Tiny  # noqa: E402
from train import SOURCES, heldout_windows, load_streams  # noqa: E402


def text_cfg(d):
    """The trainer's Cfg of an exported model's text_config."""
    with open(os.path.join(d, "config.json")) as f:
        tc = json.load(f)["text_config"]
    return Cfg(vocab=tc["vocab_size"], hidden=tc["hidden_size"], layers=tc["num_hidden_layers"],
            intermediate=tc["intermediate_size"], heads=tc["num_attention_heads"], kv_heads=tc["num_key_value_heads"],
            head_dim=tc["head_dim"], lin_k_heads=tc["linear_num_key_heads"], lin_v_heads=tc["linear_num_value_heads"],
            lin_k_dim=tc["linear_key_head_dim"], lin_v_dim=tc["linear_value_head_dim"],
            conv_kernel=tc["linear_conv_kernel_dim"], full_interval=tc["full_attention_interval"],
            rope_theta=tc["rope_parameters"]["rope_theta"], partial_rotary=tc["rope_parameters"]["partial_rotary_factor"],
            eps=tc["rms_norm_eps"], mtp=tc.get("mtp_num_hidden_layers", 0) > 0)


def load_model(d):
    c = text_cfg(d)
    m = Qwen35Tiny(c)
    st = read_safetensors(os.path.join(d, "model.safetensors"))
    sd = {k: torch.from_numpy(v) for k, v in st.items()}
    missing, unexpected = m.load_state_dict(sd, strict=True), None
    m.eval()
    return m, c


@torch.no_grad()
def generate(m, ids, n, eos=(), temperature=0.0, top_k=0, top_p=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = list(ids)
    out = []
    for _ in range(n):
        lg = m.logits(m.trunk(torch.tensor([ids])))[0, -1].double()
        if temperature <= 0:
            t = int(lg.argmax())
        else:
            lg = lg / temperature
            if top_k:
                kth = lg.topk(top_k).values[-1]
                lg = lg.masked_fill(lg < kth, float("-inf"))
            p = lg.softmax(-1)
            if top_p < 1.0:
                sp, si = p.sort(descending=True)
                keep = sp.cumsum(0) - sp < top_p
                p = torch.zeros_like(p).scatter(0, si[keep], sp[keep])
                p = p / p.sum()
            t = int(torch.multinomial(p.float(), 1, generator=g))
        out.append(t)
        ids.append(t)
        if t in eos:
            break
    return out


@torch.no_grad()
def mtp_agreement(m, seq):
    """seq [T] tokens. Returns (#agree with main argmax at t+1, #agree with true x_{t+2}, #positions)."""
    ids = torch.tensor([seq])
    h = m.trunk(ids)
    main = m.logits(h)[0]                                   # [T, V]
    mt = m.logits(m.mtp_hidden(h[:, :-1], ids[:, 1:]))[0]   # [T-1, V], position t predicts x_{t+2}
    draft = mt[:-1].argmax(-1)                              # t = 0..T-3
    verify = main[1:-1].argmax(-1)                          # main head at t+1
    true = ids[0, 2:]
    return int((draft == verify).sum()), int((draft == true).sum()), int(draft.numel())


def log_softmax_np(x):
    x = x.astype(np.float64)
    mx = x.max(-1, keepdims=True)
    return x - mx - np.log(np.exp(x - mx).sum(-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--engine", default="build/qwen35", help="the qwen35 binary")
    ap.add_argument("--oracle", required=True, help="the float64 Qwen3.5 reference (qwen35_ref.py)")
    ap.add_argument("--windows", type=int, default=4, help="held-out windows per source")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--oracle-tokens", type=int, default=256)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--mlx", help="MLX 4-bit export to evaluate with the engine")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    res = {}
    m, c = load_model(a.model)
    tok = bpe.Tokenizer.from_hf_json(os.path.join(a.model, "tokenizer.json"))
    held = load_streams(a.data, "heldout")
    win = heldout_windows(held, a.seq, a.windows)                      # [N, T+1]
    tmp = tempfile.mkdtemp(prefix="q35eval")

    # ---- oracle agreement (float32) on held-out tokens
    if a.oracle and a.oracle_tokens:
        toks = win[0, :a.oracle_tokens].tolist()
        out = os.path.join(tmp, "oracle.npy")
        subprocess.run([sys.executable, a.oracle, a.model, "--tokens", ",".join(map(str, toks)), "--dtype", "float32",
                        "--out", out], check=True, capture_output=True)
        ref = np.load(out)
        with torch.no_grad():
            mine = m.logits(m.trunk(torch.tensor([toks])))[0].double().numpy()
        d = np.abs(ref - mine)
        res["oracle_max_abs_diff"] = float(d.max())
        res["oracle_max_rel_diff"] = float(d.max() / np.abs(ref).max())
        res["oracle_tokens"] = len(toks)
        res["oracle_argmax_agree"] = float((ref.argmax(-1) == mine.argmax(-1)).mean())
        print(f"oracle (float32) vs trainer on {len(toks)} held-out tokens: max |dlogit| {d.max():.3e} "
              f"(max |logit| {np.abs(ref).max():.2f}), argmax agreement {res['oracle_argmax_agree']:.4f}", flush=True)

    # ---- perplexity: trainer vs engine
    nll_t, nll_e, n = {}, {}, {}
    per_src = a.windows
    for wi in range(win.shape[0]):
        src = SOURCES[wi // per_src] if wi // per_src < len(SOURCES) else "?"
        inp, tgt = win[wi, :-1], win[wi, 1:].numpy()
        with torch.no_grad():
            lt = m.logits(m.trunk(inp[None]))[0].double().numpy()
        lp = log_softmax_np(lt)
        nll_t[src] = nll_t.get(src, 0.0) - lp[np.arange(len(tgt)), tgt].sum()
        n[src] = n.get(src, 0) + len(tgt)
        if a.engine:
            out = os.path.join(tmp, f"eng{wi}.npy")
            subprocess.run(["nice", a.engine, "logits", "-t", "1", "-m", a.model, "--tokens", ",".join(map(str, inp.tolist())),
                            "--out", out], check=True, capture_output=True)
            le = np.load(out)
            lpe = log_softmax_np(le)
            nll_e[src] = nll_e.get(src, 0.0) - lpe[np.arange(len(tgt)), tgt].sum()
            res.setdefault("engine_max_abs_logit_diff", 0.0)
            res["engine_max_abs_logit_diff"] = max(res["engine_max_abs_logit_diff"], float(np.abs(le - lt).max()))
    tot_n = sum(n.values())
    res["ppl_trainer"] = {s: math.exp(nll_t[s] / n[s]) for s in n}
    res["ppl_trainer"]["all"] = math.exp(sum(nll_t.values()) / tot_n)
    res["heldout_tokens"] = tot_n
    print(f"held-out perplexity (trainer, {tot_n} predicted tokens): " +
          ", ".join(f"{k} {v:.4f}" for k, v in res["ppl_trainer"].items()), flush=True)
    if a.engine:
        res["ppl_engine"] = {s: math.exp(nll_e[s] / n[s]) for s in n}
        res["ppl_engine"]["all"] = math.exp(sum(nll_e.values()) / tot_n)
        res["ppl_rel_diff"] = abs(res["ppl_engine"]["all"] / res["ppl_trainer"]["all"] - 1)
        print("held-out perplexity (engine):  " + ", ".join(f"{k} {v:.4f}" for k, v in res["ppl_engine"].items()) +
              f"; relative difference {res['ppl_rel_diff']:.2e}; max |dlogit| {res['engine_max_abs_logit_diff']:.2e}",
              flush=True)

    # ---- MLX 4-bit export: engine perplexity on the same windows, oracle vs engine on the first
    if a.mlx and a.engine:
        nll, tot = 0.0, 0
        for wi in range(win.shape[0]):
            inp, tgt = win[wi, :-1], win[wi, 1:].numpy()
            out = os.path.join(tmp, f"mlx{wi}.npy")
            subprocess.run(["nice", a.engine, "logits", "-t", "1", "-m", a.mlx, "--tokens",
                            ",".join(map(str, inp.tolist())), "--out", out], check=True, capture_output=True)
            le = np.load(out)
            nll -= log_softmax_np(le)[np.arange(len(tgt)), tgt].sum()
            tot += len(tgt)
            if wi == 0 and a.oracle:
                ro = os.path.join(tmp, "mlx_oracle.npy")
                subprocess.run([sys.executable, a.oracle, a.mlx, "--tokens", ",".join(map(str, inp.tolist())),
                                "--dtype", "float32", "--out", ro], check=True, capture_output=True)
                res["mlx_oracle_vs_engine_max_abs"] = float(np.abs(np.load(ro) - le).max())
        res["ppl_engine_mlx4"] = math.exp(nll / tot)
        print(f"MLX 4-bit export: engine perplexity {res['ppl_engine_mlx4']:.4f} (bf16: "
              f"{res.get('ppl_engine', {}).get('all', float('nan')):.4f}); oracle vs engine max |dlogit| "
              f"{res.get('mlx_oracle_vs_engine_max_abs', float('nan')):.2e}", flush=True)

    # ---- MTP agreement
    if c.mtp:
        ag, at, tot = 0, 0, 0
        for wi in range(win.shape[0]):
            x, y, z = mtp_agreement(m, win[wi].tolist())
            ag += x; at += y; tot += z
        res["mtp_agree_main_heldout"] = ag / tot
        res["mtp_top1_true_heldout"] = at / tot
        print(f"MTP on held-out text ({tot} positions): agrees with main head's next-next argmax {ag / tot:.4f}; "
              f"top-1 accuracy vs true token {at / tot:.4f}", flush=True)

    # ---- samples
    im_end, eot = tok.added["<|im_end|>"], tok.added["<|endoftext|>"]
    prompts = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the",
               "A fool and his money"]
    chats = ["Give me a verse from the Bible.", "Tell me a fortune.", "Who are you?"]
    samples = []
    gen_ids_for_mtp = []
    for p in prompts:
        ids = tok.encode(p)
        g = generate(m, ids, 60, eos=(eot,))
        gen_ids_for_mtp.append(ids + g)
        s = generate(m, ids, 60, eos=(eot,), temperature=0.8, top_k=40, top_p=0.95, seed=1)
        samples.append({"prompt": p, "greedy": tok.decode(g), "sampled": tok.decode(s), "greedy_ids": g})
    for q in chats:
        txt = f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n"
        ids = tok.encode(txt)
        g = generate(m, ids, 80, eos=(im_end, eot))
        gen_ids_for_mtp.append(ids + g)
        s = generate(m, ids, 80, eos=(im_end, eot), temperature=0.7, top_k=20, top_p=0.8, seed=1)
        samples.append({"prompt": txt, "greedy": tok.decode(g), "sampled": tok.decode(s), "greedy_ids": g})
    for s in samples:
        print("---- prompt:", repr(s["prompt"]))
        print("greedy :", repr(s["greedy"]))
        print("sampled:", repr(s["sampled"]), flush=True)
    res["samples"] = samples
    # engine greedy must reproduce the trainer's greedy continuation (first plain prompt)
    if a.engine:
        ids = tok.encode(prompts[0])
        out = os.path.join(tmp, "g.npy")
        r = subprocess.run(["nice", a.engine, "logits", "-t", "1", "-m", a.model, "--tokens", ",".join(map(str, ids)), "--out", out,
                            "--greedy", "20"], capture_output=True, text=True)
        try:
            eg = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            eg = None
        mine = samples[0]["greedy_ids"][:20]
        res["engine_greedy_matches_trainer"] = eg == mine
        print(f"engine greedy (20 tokens) == trainer greedy: {eg == mine}", flush=True)
    if c.mtp:
        ag, tot = 0, 0
        for seq in gen_ids_for_mtp:
            x, _, z = mtp_agreement(m, seq)
            ag += x; tot += z
        res["mtp_agree_main_greedy"] = ag / max(1, tot)
        print(f"MTP along greedy generations ({tot} positions): agreement {ag / max(1, tot):.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
