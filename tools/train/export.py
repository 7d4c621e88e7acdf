"""Export the trained model: Hugging Face Qwen3.5 layout (bf16) and MLX affine 4-bit.

    /usr/bin/python3 tools/train/export.py --ckpt RUN/ckpt.pt --tokenizer DATA/tokenizer.json \
        --out models/qwen35-tiny-kjv [--mlx-out models/qwen35-tiny-kjv/mlx-4bit]

HF layout: config.json = Qwen3_5ForConditionalGeneration with text_config, tensors
model.language_model.* (bf16; A_log f32), conv1d [C,1,K], zero-centred norms stored as w,
mtp.* at the root, tied embeddings (no lm_head.weight).
MLX layout (what mlx-lm's convert writes): language_model.model.*, conv1d [C,K,1], the
zero-centred norms stored as 1+w, every Linear/Embedding with in_dim % group == 0 quantised
(uint32 weight + bf16 scales/biases), mtp.* dropped, "quantization" in config.json.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CHAT_TEMPLATE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "fixtures",
                             "chat_template", "qwen35", "chat_template.jinja")


# ------------------------------------------------------------------ numerics
def f32_to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + (((u >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)


def bf16_round(x):
    return (f32_to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def quantize_affine(w, group, bits):
    """MLX affine quantisation of a float32 [rows, cols] matrix (mirrors mlx's affine_quantize):
    per group of `group` columns, scale anchored on the larger-magnitude edge (so it may be negative),
    w ~ scale*q + bias with q in [0, 2^bits-1]. Returns packed uint32 codes, scales, biases (f32)."""
    rows, cols = w.shape
    n_bins = float((1 << bits) - 1)
    wg = w.astype(np.float32).reshape(rows, cols // group, group)
    hi = wg.max(-1, keepdims=True)
    lo = wg.min(-1, keepdims=True)
    neg_edge = np.abs(lo) > np.abs(hi)
    scale = np.maximum((hi - lo) / np.float32(n_bins), np.float32(1e-7))
    scale = np.where(neg_edge, scale, -scale)
    edge = np.where(neg_edge, lo, hi)
    q_edge = np.round(edge / scale)
    scale = np.where(q_edge != 0, edge / np.where(q_edge != 0, q_edge, 1), scale).astype(np.float32)
    bias = np.where(q_edge == 0, np.float32(0), edge).astype(np.float32)
    q = np.clip(np.round((wg - bias) / scale), 0, n_bins).astype(np.uint64).reshape(rows, cols)
    # one little-endian bit stream per row
    per_word = 32 // bits if 32 % bits == 0 else None
    assert per_word is not None, "only 2/4/8 bits are written here"
    q = q.reshape(rows, cols // per_word, per_word)
    words = (q << (np.arange(per_word, dtype=np.uint64) * np.uint64(bits))).sum(-1)
    return words.astype(np.uint32), scale[..., 0], bias[..., 0]


# ------------------------------------------------------------------ safetensors
def write_safetensors(path, tensors, metadata):
    """tensors: {name: (dtype_str, np.ndarray already in that dtype's storage)}; sorted by name."""
    header = {"__metadata__": metadata}
    off = 0
    names = sorted(tensors)
    for n in names:
        dt, arr = tensors[n]
        header[n] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            f.write(np.ascontiguousarray(tensors[n][1]).tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = data[s:e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        else:
            raise ValueError(v["dtype"])
        out[k] = a.reshape(v["shape"]).copy()
    return out


# ------------------------------------------------------------------ configs
def hf_config(c, eos_id, pad_id):
    rd = int(c["head_dim"] * c["partial_rotary"])
    half = rd // 2
    s0 = int(round(half * 11 / 32)); s1 = s0; s2 = half - s0 - s1
    lt = ["full_attention" if (i + 1) % c["full_interval"] == 0 else "linear_attention" for i in range(c["layers"])]
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": None,
        "dtype": "bfloat16", "eos_token_id": eos_id, "full_attention_interval": c["full_interval"],
        "head_dim": c["head_dim"], "hidden_act": "silu", "hidden_size": c["hidden"], "initializer_range": 0.02,
        "intermediate_size": c["intermediate"], "layer_types": lt, "linear_conv_kernel_dim": c["conv_kernel"],
        "linear_key_head_dim": c["lin_k_dim"], "linear_num_key_heads": c["lin_k_heads"],
        "linear_num_value_heads": c["lin_v_heads"], "linear_value_head_dim": c["lin_v_dim"],
        "mamba_ssm_dtype": "float32", "max_position_embeddings": 4096, "mlp_only_layers": [],
        "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1 if c["mtp"] else 0,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": c["heads"], "num_hidden_layers": c["layers"],
        "num_key_value_heads": c["kv_heads"], "pad_token_id": None, "partial_rotary_factor": c["partial_rotary"],
        "rms_norm_eps": c["eps"],
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [s0, s1, s2],
                            "partial_rotary_factor": c["partial_rotary"], "rope_theta": c["rope_theta"],
                            "rope_type": "default"},
        "tie_word_embeddings": True, "use_cache": True, "vocab_size": c["vocab"],
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": dict(sorted(text.items())),
        "tie_word_embeddings": True,
        "transformers_version": "5.0.0",
    }


def write_tokenizer_files(out, tok_json_path, eos_ids, pad_id):
    shutil.copyfile(tok_json_path, os.path.join(out, "tokenizer.json"))
    with open(CHAT_TEMPLATE, encoding="utf-8") as f:
        tmpl = f.read()
    with open(tok_json_path, encoding="utf-8") as f:
        tj = json.load(f)
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
             for t in tj["added_tokens"]}
    tc = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "bos_token": None, "chat_template": tmpl, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 4096,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
    gc = {"bos_token_id": None, "do_sample": True, "eos_token_id": eos_ids, "pad_token_id": pad_id,
          "temperature": 0.7, "top_k": 20, "top_p": 0.8, "transformers_version": "5.0.0"}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gc, f, indent=2)


ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def is_zero_centred(name):
    if name.endswith(ZERO_CENTRED):
        return True
    return name in ("model.language_model.norm.weight",) or name.startswith("mtp.") and name.endswith(
        ("mtp.norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight"))


def export_hf(state, c, tok_json, out, eos_id, im_end_id, pad_id):
    """state: {name: float32 numpy} with HF names."""
    os.makedirs(out, exist_ok=True)
    tens = {}
    for n, a in state.items():
        if n.endswith("A_log"):
            tens[n] = ("F32", a.astype("<f4"))
        else:
            tens[n] = ("BF16", f32_to_bf16_bits(a))
    write_safetensors(os.path.join(out, "model.safetensors"), tens, {"format": "pt"})
    cfg = hf_config(c, eos_id, pad_id)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_tokenizer_files(out, tok_json, [im_end_id, eos_id], pad_id)


def export_mlx(state, c, tok_json, out, eos_id, im_end_id, pad_id, bits=4, group=64):
    os.makedirs(out, exist_ok=True)
    tens = {}
    quantized = []
    for n, a in sorted(state.items()):
        if n.startswith("mtp."):
            continue                                     # mlx-lm drops the MTP head
        a = bf16_round(a) if not n.endswith("A_log") else a.astype(np.float32)   # start from the bf16 checkpoint
        m = "language_model.model." + n[len("model.language_model."):]
        if n.endswith("conv1d.weight"):
            tens[m] = ("BF16", f32_to_bf16_bits(np.moveaxis(a, 1, 2)))        # [C,1,K] -> [C,K,1]
        elif is_zero_centred(n):
            tens[m] = ("BF16", f32_to_bf16_bits(bf16_round(np.float32(1.0) + a)))
        elif n.endswith("A_log"):
            tens[m] = ("F32", a.astype("<f4"))
        elif a.ndim == 2 and a.shape[-1] % group == 0:   # Linear / Embedding
            wq, s, b = quantize_affine(a, group, bits)
            base = m[:-len(".weight")]
            tens[m] = ("U32", wq)
            tens[base + ".scales"] = ("BF16", f32_to_bf16_bits(s))
            tens[base + ".biases"] = ("BF16", f32_to_bf16_bits(b))
            quantized.append(base)
        else:
            tens[m] = ("BF16", f32_to_bf16_bits(a))
    write_safetensors(os.path.join(out, "model.safetensors"), tens, {"format": "mlx"})
    cfg = hf_config(c, eos_id, pad_id)
    cfg["text_config"]["mtp_num_hidden_layers"] = 0
    q = {"group_size": group, "bits": bits, "mode": "affine"}
    cfg["quantization"] = q
    cfg["quantization_config"] = dict(q)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_tokenizer_files(out, tok_json, [im_end_id, eos_id], pad_id)
    return quantized


def main():
    sys.path.insert(0, HERE)
    import torch
    import bpe
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mlx-out")
    ap.add_argument("--mlx-group", type=int, default=64)
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu")
    c = ck["cfg"]
    state = {k: v.float().numpy() for k, v in ck["model"].items()}
    tok = bpe.Tokenizer.from_hf_json(a.tokenizer)
    eos, im_end = tok.added["<|endoftext|>"], tok.added["<|im_end|>"]
    export_hf(state, c, a.tokenizer, a.out, eos, im_end, eos)
    print(f"wrote {a.out}: {len(state)} tensors, {sum(v.size for v in state.values())} params")
    if a.mlx_out:
        qz = export_mlx(state, c, a.tokenizer, a.mlx_out, eos, im_end, eos, 4, a.mlx_group)
        print(f"wrote {a.mlx_out}: {len(qz)} quantized modules")


if __name__ == "__main__":
    main()
