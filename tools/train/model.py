"""A small Qwen3.5 (qwen3_5 dense) language model in plain torch, with one MTP layer.

Module names follow the Hugging Face checkpoint, so state_dict keys map 1:1 onto the exported
tensor names (model.language_model.* for the trunk, mtp.* for the MTP head).

  * hybrid layers: Gated DeltaNet (chunked UT form) and gated full attention (QK-norm, partial
    rotate-half RoPE, GQA, sigmoid output gate interleaved per head in q_proj), pattern L L L F
  * zero-centred RMSNorm x*rsqrt(mean(x^2)+eps)*(1+w) everywhere except the GDN output norm
  * SwiGLU MLP, tied embeddings
  * MTP (Qwen3-Next / DeepSeek-V3 style): at position t,
        m_t = fc( [ pre_fc_norm_embedding(E[x_{t+1}]) ; pre_fc_norm_hidden(h_t) ] )
    where h_t is the trunk's final hidden state AFTER the final norm (what vLLM / SGLang feed their
    MTP drafters), then one full-attention decoder layer over m (positions t), mtp.norm, and the
    tied LM head; it predicts x_{t+2}.
"""
import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Cfg:
    vocab: int = 4096
    hidden: int = 128
    layers: int = 8
    intermediate: int = 384
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    lin_k_heads: int = 2
    lin_v_heads: int = 4
    lin_k_dim: int = 32
    lin_v_dim: int = 32
    conv_kernel: int = 4
    full_interval: int = 4
    rope_theta: float = 10000.0
    partial_rotary: float = 0.25
    eps: float = 1e-6
    chunk: int = 64
    mtp: bool = True

    @property
    def layer_types(self):
        return ["full_attention" if (i + 1) % self.full_interval == 0 else "linear_attention"
                for i in range(self.layers)]

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary)


class RMSNorm(nn.Module):
    """Zero-centred (weight init 0, applied as 1+w) unless centred=False (plain w, init 1)."""

    def __init__(self, n, eps, centred=True):
        super().__init__()
        self.centred = centred
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(n) if centred else torch.ones(n))

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * (1.0 + self.weight) if self.centred else y * self.weight


def rope_tables(T, rd, theta, device=None, offset=0):
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    """x [B, T, h, d]; rotate-half on the first rd dims. cos, sin: [T, rd] shared by the batch, or
    [B, T, rd] per row (multimodal positions, vision_model.py)."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    rot = torch.cat([-x2, x1], -1)
    if cos.dim() == 3:
        c, s = cos[:, :, None, :], sin[:, :, None, :]
    else:
        c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([xr * c + rot * s, xp], -1)


class Attention(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.c = c
        H, nh, nkv, hd = c.hidden, c.heads, c.kv_heads, c.head_dim
        self.q_proj = nn.Linear(H, nh * hd * 2, bias=False)
        self.k_proj = nn.Linear(H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, c.eps)
        self.k_norm = RMSNorm(hd, c.eps)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        nh, nkv, hd = c.heads, c.kv_heads, c.head_dim
        qg = self.q_proj(x).view(B, T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(B, T, nh * hd)
        k = self.k_proj(x).view(B, T, nkv, hd)
        v = self.v_proj(x).view(B, T, nkv, hd)
        q = apply_rope(self.q_norm(q), cos, sin)
        k = apply_rope(self.k_norm(k), cos, sin)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)     # [B, h, T, d]
        s = (q @ k.transpose(-1, -2)) * (hd ** -0.5)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, nh * hd)
        return self.o_proj(o * torch.sigmoid(gate))


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def chunk_delta_rule(q, k, v, g, beta, C):
    """Chunked (UT-transform) gated delta rule, zero initial state.
    q, k [B, h, T, dk] (q scaled, both L2-normalised), v [B, h, T, dv], g, beta [B, h, T]."""
    B, h, T, dk = k.shape
    dv = v.shape[-1]
    pad = (C - T % C) % C
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // C
    q = q.reshape(B, h, n, C, dk)
    k = k.reshape(B, h, n, C, dk)
    v = v.reshape(B, h, n, C, dv)
    g = g.reshape(B, h, n, C)
    beta = beta.reshape(B, h, n, C)
    kb = k * beta[..., None]
    vb = v * beta[..., None]
    cum = g.cumsum(-1)
    diff = cum[..., :, None] - cum[..., None, :]
    upper = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    decay = diff.masked_fill(upper, float("-inf")).exp()                # exp(cum_i - cum_j), j <= i
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    A = ((kb @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)  # strictly lower
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    M = eye + A
    rhs = torch.cat([vb, kb * cum.exp()[..., None]], -1)
    sol = torch.linalg.solve_triangular(M, rhs, upper=False, unitriangular=True)
    u, w = sol[..., :dv], sol[..., dv:]
    intra = (q @ k.transpose(-1, -2)) * decay
    qd = q * cum.exp()[..., None]
    kd = k * (cum[..., -1:] - cum).exp()[..., None]
    cdecay = cum[..., -1].exp()
    S = q.new_zeros(B, h, dk, dv)
    outs = []
    for i in range(n):
        vn = u[:, :, i] - w[:, :, i] @ S
        outs.append(qd[:, :, i] @ S + intra[:, :, i] @ vn)
        S = S * cdecay[:, :, i, None, None] + kd[:, :, i].transpose(-1, -2) @ vn
    o = torch.stack(outs, 2).reshape(B, h, n * C, dv)[:, :, :T]
    return o


class GatedDeltaNet(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.c = c
        H = c.hidden
        kd, vd = c.lin_k_heads * c.lin_k_dim, c.lin_v_heads * c.lin_v_dim
        self.conv_dim = 2 * kd + vd
        self.in_proj_qkv = nn.Linear(H, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, vd, bias=False)
        self.in_proj_b = nn.Linear(H, c.lin_v_heads, bias=False)
        self.in_proj_a = nn.Linear(H, c.lin_v_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, c.conv_kernel, groups=self.conv_dim, bias=False)
        self.A_log = nn.Parameter(torch.empty(c.lin_v_heads))
        self.dt_bias = nn.Parameter(torch.empty(c.lin_v_heads))
        self.norm = RMSNorm(c.lin_v_dim, c.eps, centred=False)
        self.out_proj = nn.Linear(vd, H, bias=False)

    def forward(self, x):
        c = self.c
        B, T, _ = x.shape
        nk, nv, dk, dv = c.lin_k_heads, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim
        qkv = self.in_proj_qkv(x).transpose(1, 2)                            # [B, C, T]
        qkv = F.conv1d(F.pad(qkv, (c.conv_kernel - 1, 0)), self.conv1d.weight, groups=self.conv_dim)
        qkv = F.silu(qkv).transpose(1, 2)                                     # [B, T, C]
        q = qkv[..., :nk * dk].reshape(B, T, nk, dk)
        k = qkv[..., nk * dk:2 * nk * dk].reshape(B, T, nk, dk)
        v = qkv[..., 2 * nk * dk:].reshape(B, T, nv, dv)
        q = l2norm(q) * (dk ** -0.5)
        k = l2norm(k)
        rep = nv // nk
        if rep > 1:
            q = q.repeat_interleave(rep, dim=2)
            k = k.repeat_interleave(rep, dim=2)
        beta = torch.sigmoid(self.in_proj_b(x))                               # [B, T, nv]
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        o = chunk_delta_rule(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             g.transpose(1, 2), beta.transpose(1, 2), c.chunk)  # [B, nv, T, dv]
        o = o.transpose(1, 2)                                                  # [B, T, nv, dv]
        z = self.in_proj_z(x).view(B, T, nv, dv)
        y = self.norm(o) * F.silu(z)
        return self.out_proj(y.reshape(B, T, nv * dv))


class MLP(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: Cfg, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = Attention(c)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        x = x + (self.linear_attn(h) if self.kind == "linear_attention" else self.self_attn(h, cos, sin))
        return x + self.mlp(self.post_attention_layernorm(x))


class TextModel(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList([Layer(c, t) for t in c.layer_types])
        self.norm = RMSNorm(c.hidden, c.eps)


class MTP(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.fc = nn.Linear(2 * c.hidden, c.hidden, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(c.hidden, c.eps)
        self.pre_fc_norm_hidden = RMSNorm(c.hidden, c.eps)
        self.layers = nn.ModuleList([Layer(c, "full_attention")])
        self.norm = RMSNorm(c.hidden, c.eps)


class Wrapper(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.language_model = TextModel(c)


class Qwen35Tiny(nn.Module):
    def __init__(self, c: Cfg):
        super().__init__()
        self.c = c
        self.model = Wrapper(c)
        if c.mtp:
            self.mtp = MTP(c)

    @property
    def lm(self):
        return self.model.language_model

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        c = self.c
        n_res = 2 * c.layers
        for name, p in sorted(self.named_parameters()):
            with torch.no_grad():
                if name.endswith("A_log"):
                    p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
                elif name.endswith("dt_bias"):
                    dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))              # inverse softplus
                elif name.endswith("conv1d.weight"):
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(c.conv_kernel))
                elif "norm" in name.split(".")[-2] or name.endswith("norm.weight"):
                    p.copy_(torch.ones(p.shape) if ".linear_attn.norm." in name else torch.zeros(p.shape))
                elif name.endswith("embed_tokens.weight"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                else:
                    std = 0.02
                    if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                        std = 0.02 / math.sqrt(n_res)
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def trunk(self, ids):
        """ids [B, T] -> final hidden after the final norm [B, T, H]."""
        c = self.c
        T = ids.shape[1]
        cos, sin = rope_tables(T, c.rotary_dim, c.rope_theta)
        x = self.lm.embed_tokens(ids)
        for layer in self.lm.layers:
            x = layer(x, cos, sin)
        return self.lm.norm(x)

    def logits(self, h):
        return h @ self.lm.embed_tokens.weight.t()

    def mtp_hidden(self, h, next_ids):
        """h [B, T, H] trunk hidden (post-norm) at t, next_ids [B, T] = x_{t+1} -> [B, T, H]."""
        c = self.c
        e = self.mtp.pre_fc_norm_embedding(self.lm.embed_tokens(next_ids))
        m = self.mtp.fc(torch.cat([e, self.mtp.pre_fc_norm_hidden(h)], -1))
        cos, sin = rope_tables(m.shape[1], c.rotary_dim, c.rope_theta)
        for layer in self.mtp.layers:
            m = layer(m, cos, sin)
        return self.mtp.norm(m)

    def forward(self, ids):
        """Returns (main logits [B, T, V], mtp logits [B, T-1, V] predicting x_{t+2} or None)."""
        h = self.trunk(ids)
        main = self.logits(h)
        mt = None
        if self.c.mtp:
            mt = self.logits(self.mtp_hidden(h[:, :-1], ids[:, 1:]))
        return main, mt


def cfg_dict(c):
    return asdict(c)
