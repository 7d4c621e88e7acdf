"""Exports the vision demo (train_vision.py's checkpoint) as a Hugging Face Qwen3.5 image-text
checkpoint, and draws the example images that ship with it.

    /usr/bin/python3 tools/train/export_vision.py --ckpt RUN/ckpt.pt --base models/qwen35-tiny-kjv \
        --out models/qwen35-tiny-kjv-vision

Written: config.json (the text model's, plus vision_config and the root token ids of the image
pad and the vision start/end tokens in this tokenizer), preprocessor_config.json (min_pixels and
max_pixels: shapes.MIN_PIXELS and MAX_PIXELS, the budget trained on),
model.safetensors (bf16; A_log f32; the tower under model.visual.*), the tokenizer files and
generation_config.json of the base, and examples/*.png.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import f32_to_bf16_bits, hf_config, write_safetensors  # noqa: E402

# name -> (colour, shape, (height, width), seed): drawn by shapes.draw from default_rng(seed).
EXAMPLES = {
    "red_circle": ("red", "circle", (64, 64), 9001),
    "blue_star": ("blue", "star", (64, 64), 9002),
    "green_triangle": ("green", "triangle", (64, 64), 9003),
}


def token_ids(tokenizer_json):
    with open(tokenizer_json) as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    return {"image_token_id": added["<|image_pad|>"], "video_token_id": added["<|video_pad|>"],
            "vision_start_token_id": added["<|vision_start|>"], "vision_end_token_id": added["<|vision_end|>"]}


def vision_config(vc):
    return {
        "deepstack_visual_indexes": [], "depth": vc["depth"], "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": vc["hidden"], "in_channels": 3, "initializer_range": 0.02,
        "intermediate_size": vc["intermediate"], "model_type": "qwen3_5", "num_heads": vc["heads"],
        "num_position_embeddings": vc["num_pos"], "out_hidden_size": vc["out_hidden"],
        "patch_size": vc["patch"], "spatial_merge_size": vc["merge"], "temporal_patch_size": vc["temporal"],
    }


def preprocessor_config(vc):
    import shapes
    return {
        "size": {"longest_edge": shapes.MAX_PIXELS, "shortest_edge": shapes.MIN_PIXELS}, "patch_size": vc["patch"],
        "temporal_patch_size": vc["temporal"], "merge_size": vc["merge"], "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "do_resize": True, "do_rescale": True, "do_normalize": True,
        "rescale_factor": 1.0 / 255.0, "processor_class": "Qwen3VLProcessor",
        "image_processor_type": "Qwen2VLImageProcessorFast",
    }


def write_examples(out):
    import shapes
    from PIL import Image
    d = os.path.join(out, "examples")
    os.makedirs(d, exist_ok=True)
    for name, (colour, shape, size, seed) in EXAMPLES.items():
        img = shapes.draw(np.random.default_rng(seed), size[0], size[1], shape, colour)
        Image.fromarray(img).save(os.path.join(d, name + ".png"), optimize=True)


def main():
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--base", required=True, help="the text model's directory (config, tokenizer)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu")
    vc = ck["vision_cfg"]
    with open(os.path.join(a.base, "config.json")) as f:
        base_cfg = json.load(f)
    tc = base_cfg["text_config"]
    assert vc["out_hidden"] == tc["hidden_size"]
    os.makedirs(a.out, exist_ok=True)
    tens = {}
    for n, v in ck["model"].items():
        v = v.float().numpy()
        tens[n] = ("F32", v.astype("<f4")) if n.endswith("A_log") else ("BF16", f32_to_bf16_bits(v))
    write_safetensors(os.path.join(a.out, "model.safetensors"), tens, {"format": "pt"})
    c = {"layers": tc["num_hidden_layers"], "full_interval": tc["full_attention_interval"],
         "head_dim": tc["head_dim"], "partial_rotary": tc["partial_rotary_factor"], "hidden": tc["hidden_size"],
         "intermediate": tc["intermediate_size"], "conv_kernel": tc["linear_conv_kernel_dim"],
         "lin_k_dim": tc["linear_key_head_dim"], "lin_k_heads": tc["linear_num_key_heads"],
         "lin_v_heads": tc["linear_num_value_heads"], "lin_v_dim": tc["linear_value_head_dim"],
         "mtp": tc["mtp_num_hidden_layers"] > 0, "heads": tc["num_attention_heads"],
         "kv_heads": tc["num_key_value_heads"], "eps": tc["rms_norm_eps"],
         "rope_theta": tc["rope_parameters"]["rope_theta"], "vocab": tc["vocab_size"]}
    cfg = hf_config(c, tc["eos_token_id"], None)
    assert cfg["text_config"] == tc, "the text config must stay the base model's"
    cfg.update(token_ids(os.path.join(a.base, "tokenizer.json")))
    cfg["vision_config"] = vision_config(vc)
    cfg = dict(sorted(cfg.items()))
    for name, obj in (("config.json", cfg), ("preprocessor_config.json", preprocessor_config(vc))):
        with open(os.path.join(a.out, name), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(a.base, name), os.path.join(a.out, name))
    write_examples(a.out)
    n_vis = sum(v[1].size for n, v in tens.items() if n.startswith("model.visual."))
    print(f"wrote {a.out}: {len(tens)} tensors ({n_vis} tower parameters), examples {list(EXAMPLES)}")


if __name__ == "__main__":
    main()
