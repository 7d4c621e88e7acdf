"""The Qwen3.5 vision tower in plain torch, and the tiny text model reading its rows at the
multimodal rotary positions. Module names equal the HF tensor names (model.visual.*).

Written from the architecture (docs/design.md "Vision tower" and "Images: multimodal rotary
positions"):
  * patch embedding: a Conv3d with kernel = stride = (T, P, P), i.e. a linear map of each patch row
    of C*T*P*P values in (C, T, P, P) order, plus bias; rows in merge-block order (block row,
    block column, then the 2x2 patches of the block);
  * a learned side x side position table resampled bilinearly (align corners) to the patch grid;
  * 2-D rotary: the first head_dim/4 frequencies turn by the patch row, the next head_dim/4 by the
    column, rotate-half over the whole head;
  * pre-norm blocks: LayerNorm (eps 1e-6), fused qkv + bias, bidirectional attention over the
    image, proj + bias; LayerNorm, fc1 + bias, GELU tanh, fc2 + bias;
  * merger: LayerNorm per patch row, 2x2 merge blocks as one row of 4*hidden, fc1, GELU (erf),
    fc2 into the text hidden size.
The position-table resampling weights and the rotary angles are computed once per grid in float64
by the float64 reference's own functions (tools/fixtures/vision_ref.py), so the trainer and the
reference agree on that geometry by construction; everything learnt runs in torch.
"""
import json
import os
import sys
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "fixtures"))
import mrope_positions  # noqa: E402
import vision_ref  # noqa: E402
from model import Qwen35Tiny  # noqa: E402

LN_EPS = 1e-6
IMAGE_MEAN = IMAGE_STD = 0.5


@dataclass
class VisionCfg:
    depth: int = 4
    hidden: int = 64
    heads: int = 2
    intermediate: int = 256
    out_hidden: int = 128
    num_pos: int = 2304          # the released towers' 48 x 48 table
    patch: int = 16
    temporal: int = 2
    merge: int = 2
    theta: float = 10000.0

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def side(self):
        return int(round(self.num_pos ** 0.5))

    @property
    def row_width(self):
        return 3 * self.temporal * self.patch * self.patch


def patch_rows(images, c):
    """uint8 [B, H, W, 3] (H, W multiples of patch*merge) -> float32 [B, N, 1536] patch rows as
    the processor makes them: rescale, normalize, the frame repeated over T, merge-block order."""
    x = torch.from_numpy(np.array(images, dtype=np.float32)).div(255.0).sub(IMAGE_MEAN).div(IMAGE_STD)
    B, H, W, _ = x.shape
    P, M = c.patch, c.merge
    gh, gw = H // P, W // P
    x = x.permute(0, 3, 1, 2).reshape(B, 3, gh // M, M, P, gw // M, M, P)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)                # B, bh, bw, dh, dw, C, py, px
    x = x[:, :, :, :, :, :, None].expand(-1, -1, -1, -1, -1, -1, c.temporal, -1, -1)
    return x.reshape(B, gh * gw, c.row_width).contiguous(), gh, gw


class PatchEmbed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.proj = nn.Conv3d(3, c.hidden, (c.temporal, c.patch, c.patch),
                              stride=(c.temporal, c.patch, c.patch), bias=True)

    def forward(self, rows):
        return rows @ self.proj.weight.reshape(self.proj.weight.shape[0], -1).t() + self.proj.bias


class VisionAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.proj = nn.Linear(c.hidden, c.hidden)

    def forward(self, x, cos, sin):
        c = self.c
        B, N, _ = x.shape
        qkv = self.qkv(x).view(B, N, 3, c.heads, c.head_dim).permute(2, 0, 3, 1, 4)  # 3, B, h, N, d
        q, k, v = rotate(qkv[0], cos, sin), rotate(qkv[1], cos, sin), qkv[2]
        s = (q @ k.transpose(-1, -2)) * (c.head_dim ** -0.5)
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, N, c.hidden)
        return self.proj(o)


def rotate(x, cos, sin):
    """Rotate-half over the whole head: pair (i, i + d/2) turned by angle i (cos, sin [N, d/2])."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class VisionMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.linear_fc1 = nn.Linear(c.hidden, c.intermediate)
        self.linear_fc2 = nn.Linear(c.intermediate, c.hidden)

    def forward(self, x):
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm1 = nn.LayerNorm(c.hidden, eps=LN_EPS)
        self.norm2 = nn.LayerNorm(c.hidden, eps=LN_EPS)
        self.attn = VisionAttention(c)
        self.mlp = VisionMLP(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Merger(nn.Module):
    def __init__(self, c):
        super().__init__()
        m2 = c.hidden * c.merge * c.merge
        self.norm = nn.LayerNorm(c.hidden, eps=LN_EPS)
        self.linear_fc1 = nn.Linear(m2, m2)
        self.linear_fc2 = nn.Linear(m2, c.out_hidden)

    def forward(self, x):
        B, N, H = x.shape
        x = self.norm(x).reshape(B, N // 4, 4 * H)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionTower(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.patch_embed = PatchEmbed(c)
        self.pos_embed = nn.Embedding(c.num_pos, c.hidden)
        self.blocks = nn.ModuleList([VisionBlock(c) for _ in range(c.depth)])
        self.merger = Merger(c)
        self._geometry = {}

    def geometry(self, gh, gw):
        """(resampling weights [N, num_pos], cos, sin [N, head_dim/2]) of a grid, in float64 once."""
        key = (gh, gw)
        if key not in self._geometry:
            c = self.c
            eye = np.eye(c.num_pos)
            interp = vision_ref.interpolate_positions(eye, c.side, gh, gw, c.merge)
            ang = vision_ref.rotary_angles(gh, gw, c.merge, c.head_dim, c.theta)
            self._geometry[key] = (torch.from_numpy(interp).float(), torch.from_numpy(np.cos(ang)).float(),
                                   torch.from_numpy(np.sin(ang)).float())
        return self._geometry[key]

    def forward(self, rows, gh, gw):
        """rows [B, N, row_width] of B images of one grid -> merged tokens [B, N/4, out_hidden]."""
        interp, cos, sin = self.geometry(gh, gw)
        x = self.patch_embed(rows) + interp @ self.pos_embed.weight
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.merger(x)

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in sorted(self.named_parameters()):
                if name.endswith("bias"):
                    p.zero_()
                elif "norm" in name:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)


class Qwen35TinyVision(Qwen35Tiny):
    """The text model plus model.visual; forward_images runs prompts that hold images."""

    def __init__(self, c, vc, image_token_id):
        super().__init__(c)
        self.vc = vc
        self.image_token_id = image_token_id
        self.model.visual = VisionTower(vc)
        self.section = mrope_section(c.rotary_dim)

    def mrope_tables(self, positions):
        """positions int64 [B, 3, T] -> cos, sin [B, T, rotary_dim] (pair j turns by its axis)."""
        rd = self.c.rotary_dim
        inv = self.c.rope_theta ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        axes = torch.from_numpy(mrope_positions.pair_axes(rd // 2, self.section))
        ang = positions[:, axes, :].transpose(1, 2).double() * inv        # B, T, rd/2
        ang = torch.cat([ang, ang], -1)
        return ang.cos().float(), ang.sin().float()

    def trunk_images(self, ids, rows, gh, gw, positions, tokens=None):
        """ids [B, T] holding (gh/2)*(gw/2) image tokens per row; rows [B, N, row_width]; tokens:
        the tower's output for rows when already computed."""
        if tokens is None:
            tokens = self.model.visual(rows, gh, gw)
        x = self.lm.embed_tokens(ids)
        mask = (ids == self.image_token_id)[..., None]
        x = x.masked_scatter(mask, tokens.to(x.dtype))
        cos, sin = self.mrope_tables(positions)
        for layer in self.lm.layers:
            x = layer(x, cos, sin)
        return self.lm.norm(x)


def mrope_section(rotary_dim):
    """Qwen3.5's [11, 11, 10] of 32 pairs, scaled to rotary_dim/2 pairs (export.py's rule)."""
    half = rotary_dim // 2
    s0 = int(round(half * 11 / 32))
    return [s0, s0, half - 2 * s0]


def positions_for(ids_rows, grid, image_token_id, merge=2):
    """int64 [B, 3, T] multimodal positions (the float64 reference's rule) of padded rows."""
    out = [mrope_positions.rope_positions(r, [grid], image_token_id, merge)[0] for r in ids_rows]
    return torch.from_numpy(np.stack(out))


def vision_cfg_dict(vc):
    return asdict(vc)


def load_vision_model(d):
    """(model in eval mode, tokenizer, config.json) of an exported demo (export_vision.py's
    directory): the bf16 tensors widened to float32."""
    import bpe
    from evaluate import text_cfg
    from export import read_safetensors
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
