"""Evaluates the exported vision demo (models/qwen35-tiny-kjv-vision).

    /usr/bin/python3 tools/train/evaluate_vision.py --model models/qwen35-tiny-kjv-vision \
        [--n 300] [--oracle DIR] [--json OUT.json]

- Held-out rates: --n images drawn by shapes.py from a seed the trainer never uses
  (train_vision.HELDOUT_SEED); the model (rebuilt in torch from the exported
  bf16 tensors, run in float32) answers "What is in the image?" greedily through the chat prompt;
  an answer names the colour (or shape) right when the only colour (shape) word in it is the
  drawn one. Reported overall and per image size.
- The examples (examples/*.png, read back from the files): the answer to each.
- The tower against the float64 reference (tools/fixtures/vision_ref.py) on held-out images.
- With --data (prep.py's output) and --base (the text model it started from): the held-out text
  loss of both, on train.py's 12 held-out windows (4 each of KJV, fortunes and chat): what the
  vision training cost the text skills.
- With --write-set DIR: one held-out 64x64 image of every colour and shape (36 PNG files) and
  manifest.json with the truth and the trainer's greedy turn for each: the engine's test
  (tests/model/vision_demo_test.cc) answers them and compares.
- With --oracle (the directory of the float64 text reference qwen35_ref.py): the logits of a whole
  image prompt and its greedy answer against the float64 reference with the tower's float64 rows
  at the image pads and the multimodal positions, as make_vision_prompt_fixtures.py does.
"""
import argparse
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))
import bpe  # noqa: E402
import mrope_positions  # noqa: E402
import shapes  # noqa: E402
import vision_ref  # noqa: E402
from export import read_safetensors  # noqa: E402
from train_vision import HELDOUT_SEED, prompt_ids  # noqa: E402
from vision_model import Qwen35TinyVision, VisionCfg, patch_rows, positions_for  # noqa: E402
from evaluate import load_model, text_cfg  # noqa: E402
from train import evaluate as text_heldout, heldout_windows, load_streams  # noqa: E402


def load_vision_model(d):
    c = text_cfg(d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    v = cfg["vision_config"]
    vc = VisionCfg(depth=v["depth"], hidden=v["hidden_size"], heads=v["num_heads"],
                   intermediate=v["intermediate_size"], out_hidden=v["out_hidden_size"],
                   num_pos=v["num_position_embeddings"], patch=v["patch_size"],
                   temporal=v["temporal_patch_size"], merge=v["spatial_merge_size"])
    m = Qwen35TinyVision(c, vc, cfg["image_token_id"])
    sd = {k: torch.from_numpy(a) for k, a in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    m.load_state_dict(sd, strict=True)
    m.eval()
    tok = bpe.Tokenizer.from_hf_json(os.path.join(d, "tokenizer.json"))
    return m, tok, cfg


@torch.no_grad()
def greedy_answers(m, tok, images, question=shapes.DEFAULT_QUESTION, max_new=16):
    """images uint8 [B, H, W, 3] of one size -> the decoded assistant turns (after the prompt)."""
    rows, gh, gw = patch_rows(images, m.vc)
    prompt = prompt_ids(tok, question, (gh // 2) * (gw // 2))
    ids = torch.tensor([prompt] * len(images))
    stops = {tok.added["<|im_end|>"], tok.added["<|endoftext|>"]}
    done = torch.zeros(len(images), dtype=torch.bool)
    for _ in range(max_new):
        pos = positions_for(ids.tolist(), (1, gh, gw), m.image_token_id)
        nxt = m.logits(m.trunk_images(ids, rows, gh, gw, pos)[:, -1]).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, tok.added["<|endoftext|>"]), nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
        done |= torch.tensor([int(t) in stops for t in nxt])
        if bool(done.all()):
            break
    out = []
    for row in ids[:, len(prompt):].tolist():
        cut = next((i for i, t in enumerate(row) if t in stops), len(row))
        out.append(tok.decode(row[:cut + 1] if cut < len(row) else row))
    return out


def final_answer(turn):
    """The answer after the think block, without the end token."""
    return turn.split("</think>")[-1].replace("<|im_end|>", "").replace("<|endoftext|>", "").strip()


def score(answer, colour, shape):
    colours, shape_words = shapes.names_in(answer)
    return colours == {colour}, shape_words == {shape}


def heldout(m, tok, n, seed, batch=50):
    rng = np.random.default_rng(seed)
    by_size = defaultdict(list)
    for _ in range(n):
        img, colour, shape, _ = shapes.sample(rng)
        by_size[img.shape[:2]].append((img, colour, shape))
    totals = defaultdict(lambda: np.zeros(5))   # n, colour, shape, both, exact
    samples = []
    for size, items in sorted(by_size.items()):
        for i in range(0, len(items), batch):
            chunk = items[i:i + batch]
            turns = greedy_answers(m, tok, np.stack([x[0] for x in chunk]))
            for (img, colour, shape), turn in zip(chunk, turns):
                ans = final_answer(turn)
                c_ok, s_ok = score(ans, colour, shape)
                row = np.array([1, c_ok, s_ok, c_ok and s_ok, ans == shapes.answer(colour, shape)], float)
                totals[f"{size[0]}x{size[1]}"] += row
                totals["all"] += row
                if len(samples) < 12:
                    samples.append({"size": list(size), "truth": shapes.answer(colour, shape), "turn": turn})
    rates = {k: {"n": int(v[0]), "colour": v[1] / v[0], "shape": v[2] / v[0], "both": v[3] / v[0],
                 "exact": v[4] / v[0]} for k, v in totals.items()}
    return rates, samples


def examples(m, tok, d):
    from PIL import Image
    out = {}
    ex = os.path.join(d, "examples")
    for name in sorted(os.listdir(ex)) if os.path.isdir(ex) else []:
        img = np.asarray(Image.open(os.path.join(ex, name)).convert("RGB"))
        out[name] = greedy_answers(m, tok, img[None])[0]
    return out


@torch.no_grad()
def tower_vs_float64(m, d, seed):
    ref = vision_ref.VisionTower.load(d)
    rng = np.random.default_rng(seed)
    worst, scale = 0.0, 0.0
    for size in ((64, 64), (96, 128)):
        img = shapes.sample(rng, size)[0]
        rows, gh, gw = patch_rows(img[None], m.vc)
        got = m.model.visual(rows, gh, gw)[0].double().numpy()
        want = ref.encode(rows[0].numpy(), np.array([[1, gh, gw]]))
        worst = max(worst, float(np.abs(got - want).max()))
        scale = max(scale, float(np.abs(want).max()))
    return {"max_abs": worst, "max_abs_value": scale}


def prompt_vs_float64(m, tok, d, oracle, seed, n_cont=12):
    """Whole image prompt: trainer float32 logits vs the float64 reference, and the greedy answer."""
    sys.path.insert(0, oracle)
    import qwen35_ref
    import make_vision_prompt_fixtures as mvpf
    mvpf.IDS = dict(mvpf.IDS, image_token_id=m.image_token_id)  # its PromptModel reads the pad id here
    img = shapes.sample(np.random.default_rng(seed), (64, 96))[0]
    rows, gh, gw = patch_rows(img[None], m.vc)
    image_rows = vision_ref.VisionTower.load(d).encode(rows[0].numpy(), np.array([[1, gh, gw]]))
    tokens = prompt_ids(tok, shapes.DEFAULT_QUESTION, (gh // 2) * (gw // 2))
    positions, delta = mrope_positions.rope_positions(tokens, [(1, gh, gw)], m.image_token_id)
    ref_logits, cont, _ = mvpf.PromptModel(qwen35_ref, d, image_rows, positions, delta).run(tokens, n_cont)
    with torch.no_grad():
        pos = positions_for([tokens], (1, gh, gw), m.image_token_id)
        got = m.logits(m.trunk_images(torch.tensor([tokens]), rows, gh, gw, pos))[0].double().numpy()
    mine = greedy_answers(m, tok, img[None], max_new=n_cont)[0]
    return {"max_abs_logits": float(np.abs(got - ref_logits).max()),
            "max_abs_logit": float(np.abs(ref_logits).max()),
            "argmax_equal": bool((got.argmax(-1) == ref_logits.argmax(-1)).all()),
            "reference_greedy": tok.decode(cont), "trainer_greedy": mine}


def write_set(m, tok, out, seed):
    from PIL import Image
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    items = []
    for colour in shapes.COLOURS:
        for shape in shapes.SHAPES:
            img = shapes.draw(rng, 64, 64, shape, colour)
            name = f"{len(items):02d}.png"
            Image.fromarray(img).save(os.path.join(out, name), optimize=True)
            img = np.asarray(Image.open(os.path.join(out, name)).convert("RGB"))  # as the engine reads it
            items.append({"file": name, "colour": colour, "shape": shape,
                          "trainer_turn": greedy_answers(m, tok, img[None])[0]})
    rates = [score(final_answer(x["trainer_turn"]), x["colour"], x["shape"]) for x in items]
    manifest = {"question": shapes.DEFAULT_QUESTION, "seed": seed, "images": items,
                "trainer_colour_right": sum(c for c, _ in rates), "trainer_shape_right": sum(s for _, s in rates),
                "note": "written by tools/train/evaluate_vision.py --write-set; trainer_turn: the greedy "
                        "assistant turn of the trainer's model (float32 from the bf16 checkpoint)"}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest


def text_loss(m, vision_m, data):
    windows = heldout_windows(load_streams(data, "heldout"), 256, 4)
    (base, base_mtp), (mine, mine_mtp) = (text_heldout(x, windows, 0.3) for x in (m, vision_m))
    m.eval()
    vision_m.eval()
    return {"base": base, "vision": mine, "base_ppl": float(np.exp(base)), "vision_ppl": float(np.exp(mine)),
            "base_mtp": base_mtp, "vision_mtp": mine_mtp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=HELDOUT_SEED)
    ap.add_argument("--oracle", help="directory of qwen35_ref.py (the float64 text reference)")
    ap.add_argument("--data", help="prep.py's output, for the held-out text loss")
    ap.add_argument("--base", help="the text model the demo started from")
    ap.add_argument("--write-set", help="write the engine test's held-out images here")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.time()
    m, tok, _ = load_vision_model(a.model)
    report = {"model": a.model, "heldout_seed": a.seed}
    report["tower_vs_float64"] = tower_vs_float64(m, a.model, a.seed + 1)
    print("tower vs float64:", report["tower_vs_float64"], flush=True)
    if a.oracle:
        report["prompt_vs_float64"] = prompt_vs_float64(m, tok, a.model, a.oracle, a.seed + 2)
        print("prompt vs float64:", report["prompt_vs_float64"], flush=True)
    if a.data and a.base:
        report["text_heldout"] = text_loss(load_model(a.base)[0], m, a.data)
        print("held-out text loss (nats):", report["text_heldout"], flush=True)
    if a.write_set:
        ms = write_set(m, tok, a.write_set, a.seed + 3)
        print(f"wrote {a.write_set}: 36 images, trainer colour {ms['trainer_colour_right']}/36 "
              f"shape {ms['trainer_shape_right']}/36", flush=True)
    report["examples"] = examples(m, tok, a.model)
    for k, v in report["examples"].items():
        print(f"example {k}: {v!r}")
    report["heldout"], report["samples"] = heldout(m, tok, a.n, a.seed)
    for k, r in sorted(report["heldout"].items()):
        print(f"held-out {k:>8}: n={r['n']:4d} colour {r['colour']:.3f} shape {r['shape']:.3f} "
              f"both {r['both']:.3f} exact {r['exact']:.3f}")
    for s in report["samples"][:6]:
        print(f"  {s['truth']!r:24} -> {s['turn']!r}")
    report["seconds"] = round(time.time() - t0, 1)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
