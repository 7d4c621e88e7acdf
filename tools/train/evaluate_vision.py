"""Evaluates the exported vision demo (models/qwen35-tiny-kjv-vision).

    /usr/bin/python3 tools/train/evaluate_vision.py --model models/qwen35-tiny-kjv-vision \
        [--n 120] [--oracle DIR] [--json OUT.json]

- Held-out rates by aspect ratio: --n images of each aspect ratio of ASPECTS (shared between its
  drawn sizes), drawn by shapes.py from a seed the trainer never uses (train_vision.HELDOUT_SEED)
  and brought to the size the model's own preprocessor_config gives them (smart_resize, PIL
  bicubic: what the engine does); the model (rebuilt in torch from the exported bf16 tensors, run
  in float32) answers "What is in the image?" greedily through the chat prompt; an answer names
  the colour (or shape) right when the only colour (shape) word in it is the drawn one.
- The examples (examples/*.png, read back from the files and brought to the processor's size):
  the answer to each.
- The tower against the float64 reference (tools/fixtures/vision_ref.py) on held-out images.
- With --data (prep.py's output) and --base (the text model it started from): the held-out text
  loss of both, on train.py's 12 held-out windows (4 each of KJV, fortunes and chat): what the
  vision training cost the text skills.
- With --write-set DIR: one held-out 64x64 image of every colour and shape, then 12 images each
  160 wide by 72 high and 72 wide by 160 high (every shape twice, every colour twice), as PNG
  files at the drawn size (the engine resizes them), and manifest.json with the truth and the
  trainer's greedy turn for each: the engine's test (tests/model/vision_demo_test.cc) answers
  them and compares.
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
import mrope_positions  # noqa: E402
import shapes  # noqa: E402
import vision_ref  # noqa: E402
from train_vision import HELDOUT_SEED, prompt_ids  # noqa: E402
from vision_model import load_vision_model, patch_rows, positions_for  # noqa: E402
from evaluate import load_model  # noqa: E402
from train import evaluate as text_heldout, heldout_windows, load_streams  # noqa: E402


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


# Held-out aspect ratios (width:height; the 160x72 and 72x160 are width x height) ->
# the (height, width) sizes drawn: small, near the processor's budget, and a photo's size
# brought down.
ASPECTS = {
    "1:1": ((64, 64), (96, 96), (128, 128), (200, 200)),
    "4:3": ((96, 128), (150, 200), (300, 400)),
    "3:4": ((128, 96), (200, 150), (400, 300)),
    "2:1": ((64, 128), (100, 200), (300, 600)),
    "1:2": ((128, 64), (200, 100), (600, 300)),
    "3:1": ((64, 192), (100, 300), (200, 600)),
    "1:3": ((192, 64), (300, 100), (600, 200)),
    "160x72": ((72, 160),),
    "72x160": ((160, 72),),
}
# The engine test's set beside the 36 64x64 images: (height, width) drawn, 12 images each.
SET_SIZES = ((72, 160), (160, 72))


def processor_budget(d):
    """(min_pixels, max_pixels) of a model directory's preprocessor_config.json, read as the engine
    reads it (size.shortest_edge / longest_edge; top-level min_pixels / max_pixels override)."""
    with open(os.path.join(d, "preprocessor_config.json")) as f:
        pc = json.load(f)
    lo, hi = pc.get("size", {}).get("shortest_edge", 65536), pc.get("size", {}).get("longest_edge", 16777216)
    return pc.get("min_pixels", lo), pc.get("max_pixels", hi)


def final_answer(turn):
    """The answer after the think block, without the end token."""
    return turn.split("</think>")[-1].replace("<|im_end|>", "").replace("<|endoftext|>", "").strip()


def score(answer, colour, shape):
    colours, shape_words = shapes.names_in(answer)
    return colours == {colour}, shape_words == {shape}


def heldout(m, tok, n, seed, budget, batch=40):
    """Rates per aspect ratio (n images each, shared between its sizes) and per drawn size."""
    rng = np.random.default_rng(seed)
    totals = defaultdict(lambda: np.zeros(5))   # n, colour, shape, both, exact
    samples = []
    for aspect, sizes in ASPECTS.items():
        for k, size in enumerate(sizes):
            items = []
            for _ in range(n // len(sizes) + (k < n % len(sizes))):
                img, colour, shape, _ = shapes.sample(rng, size)
                items.append((shapes.to_processor(img, budget), colour, shape))
            for i in range(0, len(items), batch):
                chunk = items[i:i + batch]
                turns = greedy_answers(m, tok, np.stack([x[0] for x in chunk]))
                for (img, colour, shape), turn in zip(chunk, turns):
                    ans = final_answer(turn)
                    c_ok, s_ok = score(ans, colour, shape)
                    row = np.array([1, c_ok, s_ok, c_ok and s_ok, ans == shapes.answer(colour, shape)], float)
                    totals[aspect] += row
                    totals[f"{aspect} {size[1]}x{size[0]}->{img.shape[1]}x{img.shape[0]}"] += row
                    totals["all"] += row
                    if not (c_ok and s_ok) and len(samples) < 24:
                        samples.append({"size": list(size), "truth": shapes.answer(colour, shape), "turn": turn})
    rates = {k: {"n": int(v[0]), "colour": v[1] / v[0], "shape": v[2] / v[0], "both": v[3] / v[0],
                 "exact": v[4] / v[0]} for k, v in totals.items()}
    return rates, samples


def examples(m, tok, d, budget):
    from PIL import Image
    out = {}
    ex = os.path.join(d, "examples")
    for name in sorted(os.listdir(ex)) if os.path.isdir(ex) else []:
        img = np.asarray(Image.open(os.path.join(ex, name)).convert("RGB"))
        out[name] = greedy_answers(m, tok, shapes.to_processor(img, budget)[None])[0]
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
    img = shapes.to_processor(shapes.sample(np.random.default_rng(seed), (72, 160))[0], processor_budget(d))
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


def write_set(m, tok, out, seed, budget):
    from PIL import Image
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    todo = [((64, 64), colour, shape) for colour in shapes.COLOURS for shape in shapes.SHAPES]
    colours = list(shapes.COLOURS)
    for g, size in enumerate(SET_SIZES):
        todo += [(size, colours[(i + i // 6 + 2 * g) % 6], shapes.SHAPES[i % 6]) for i in range(12)]
    items = []
    for (h, w), colour, shape in todo:
        img = shapes.draw(rng, h, w, shape, colour)
        name = f"{len(items):02d}.png"
        Image.fromarray(img).save(os.path.join(out, name), optimize=True)
        img = np.asarray(Image.open(os.path.join(out, name)).convert("RGB"))  # as the engine reads it
        items.append({"file": name, "group": f"{w}x{h}", "colour": colour, "shape": shape,
                      "trainer_turn": greedy_answers(m, tok, shapes.to_processor(img, budget)[None])[0]})
    right = defaultdict(lambda: [0, 0, 0])   # group -> n, colour right, shape right
    for x in items:
        c_ok, s_ok = score(final_answer(x["trainer_turn"]), x["colour"], x["shape"])
        for g in (x["group"], "all"):
            right[g][0] += 1
            right[g][1] += c_ok
            right[g][2] += s_ok
    manifest = {"question": shapes.DEFAULT_QUESTION, "seed": seed, "images": items,
                "trainer_right": {g: {"n": n, "colour": c, "shape": s} for g, (n, c, s) in right.items()},
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
    ap.add_argument("--n", type=int, default=120, help="held-out images per aspect ratio")
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
    budget = processor_budget(a.model)
    report = {"model": a.model, "heldout_seed": a.seed, "processor_budget": budget}
    report["tower_vs_float64"] = tower_vs_float64(m, a.model, a.seed + 1)
    print("tower vs float64:", report["tower_vs_float64"], flush=True)
    if a.oracle:
        report["prompt_vs_float64"] = prompt_vs_float64(m, tok, a.model, a.oracle, a.seed + 2)
        print("prompt vs float64:", report["prompt_vs_float64"], flush=True)
    if a.data and a.base:
        report["text_heldout"] = text_loss(load_model(a.base)[0], m, a.data)
        print("held-out text loss (nats):", report["text_heldout"], flush=True)
    if a.write_set:
        ms = write_set(m, tok, a.write_set, a.seed + 3, budget)
        for g, r in ms["trainer_right"].items():
            print(f"wrote {a.write_set} {g}: {r['n']} images, trainer colour {r['colour']}/{r['n']} "
                  f"shape {r['shape']}/{r['n']}", flush=True)
    report["examples"] = examples(m, tok, a.model, budget)
    for k, v in report["examples"].items():
        print(f"example {k}: {v!r}")
    report["heldout"], report["samples"] = heldout(m, tok, a.n, a.seed, budget)
    for k, r in sorted(report["heldout"].items(), key=lambda kv: (" " in kv[0], kv[0] == "all")):
        print(f"held-out {k:>28}: n={r['n']:4d} colour {r['colour']:.3f} shape {r['shape']:.3f} "
              f"both {r['both']:.3f} exact {r['exact']:.3f}")
    print("some mistakes:")
    for s in report["samples"][:12]:
        print(f"  {s['truth']!r:24} -> {s['turn']!r}")
    report["seconds"] = round(time.time() - t0, 1)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
