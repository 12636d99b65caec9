"""The PyTorch anchor of `dflash-bench step`: one DFlash drafter training step (forward, the
block-sparse attention, the chunked cross-entropy over the frozen lm_head, backward, fused AdamW on
the bf16 parameters) as a PyTorch user writes it, timed on the GPU.

The step is the one model/drafter.cpp computes: ctx = hidden_norm(fc(target hidden));
the noise block of each anchor (its token, then mask tokens) through the drafter's layers, whose
queries see the context strictly before their anchor and their own block, nothing when the block is
dropped; labels are the tokens at anchor + k, weighted by [k > 0] and the loss mask. Inputs are
random (bf16 target features, token ids, N sorted distinct anchors a sequence, all kept), the
embedding and lm_head frozen and random.

Modes (--modes, any of):
  flex      flex_attention compiled alone (how SpecForge trains), everything else eager
  compiled  the whole forward and loss under torch.compile, flex_attention inside
  sdpa      scaled_dot_product_attention over a dense boolean mask (the fallback)

Timing: the three warm-up steps (compilation included) give warmup_s; then --steps steps, each timed
by CUDA events; step_ms is their median. FLOP of a step, the rule dflash-bench counts by too: fc
forward and weight gradient; each layer's matrix products x3; attention x3.5 over the visible keys
only (4 hd FLOP a head per visible query-key pair, S/2 + block context keys per query on average);
the lm_head forward and input gradient.

Prints one JSON line per (mode, bucket): mode, seq, anchors, batch, layers, hidden, warmup_s,
step_ms, min_ms, loss, ctx_tok_per_s, tflops, peak_gib; or error when the step failed (an
out-of-memory or a compile failure is a result too).

  python3 scripts/anchors/ref_drafter.py --modes compiled --buckets 1024:128,4096:512
  python3 scripts/anchors/ref_drafter.py --modes compiled --hidden 1024 --inter 3072 --layers 2 \\
      --heads 16 --kv-heads 8 --head-dim 64 --buckets 512:64      # the small drafter
"""
import argparse
import json
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class Dims:
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    features: int  # target layers read (F): fc maps F * hidden to hidden
    block: int


def options():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--inter", type=int, default=12288)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--feat-layers", type=int, default=5)
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--buckets", default="1024:128,2048:256,4096:512", help="SEQ:ANCHORS,...")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--modes", default="flex,compiled,sdpa")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--loss-chunk", type=int, default=2048, help="rows of logits a checkpointed CE chunk holds")
    return p.parse_args()


def rms_norm(x, weight, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x, positions, theta=1e6):
    """Rotate-half RoPE of x [B, heads, L, d] at positions [B, L]."""
    half = x.shape[-1] // 2
    freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angle = positions.float()[:, None, :, None] * freq
    cos = angle.cos().repeat(1, 1, 1, 2).to(x.dtype)
    sin = angle.sin().repeat(1, 1, 1, 2).to(x.dtype)
    lo, hi = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-hi, lo), dim=-1) * sin


class Layer(torch.nn.Module):
    def __init__(self, d, new):
        super().__init__()
        self.attn_norm, self.mlp_norm = new.ones(d.hidden), new.ones(d.hidden)
        self.q_norm, self.k_norm = new.ones(d.head_dim), new.ones(d.head_dim)
        self.wq = new.randn(d.heads * d.head_dim, d.hidden)
        self.wk = new.randn(d.kv_heads * d.head_dim, d.hidden)
        self.wv = new.randn(d.kv_heads * d.head_dim, d.hidden)
        self.wo = new.randn(d.hidden, d.heads * d.head_dim)
        self.gate, self.up = new.randn(d.inter, d.hidden), new.randn(d.inter, d.hidden)
        self.down = new.randn(d.hidden, d.inter)
        self.d = d

    def forward(self, h, ctx, q_pos, k_pos, attend):
        d = self.d
        B, T, S = h.shape[0], h.shape[1], ctx.shape[1]
        x = rms_norm(h, self.attn_norm)
        both = torch.cat((ctx, x), dim=1)  # keys and values: the context, then the draft block
        q = rms_norm(F.linear(x, self.wq).view(B, T, d.heads, d.head_dim), self.q_norm).transpose(1, 2)
        k = rms_norm(F.linear(both, self.wk).view(B, S + T, d.kv_heads, d.head_dim), self.k_norm).transpose(1, 2)
        v = F.linear(both, self.wv).view(B, S + T, d.kv_heads, d.head_dim).transpose(1, 2)
        a = attend(rope(q, q_pos), rope(k, k_pos), v)
        h = h + F.linear(a.transpose(1, 2).reshape(B, T, d.heads * d.head_dim), self.wo)
        x = rms_norm(h, self.mlp_norm)
        return h + F.linear(F.silu(F.linear(x, self.gate)) * F.linear(x, self.up), self.down)


class Params:
    """Makes the drafter's bf16 parameters on the GPU: norms at 1, matrices N(0, 0.02^2)."""

    def ones(self, n):
        return torch.nn.Parameter(torch.ones(n, device="cuda", dtype=torch.bfloat16))

    def randn(self, *shape):
        return torch.nn.Parameter(torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02)


class Drafter(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        new = Params()
        self.fc, self.hidden_norm = new.randn(d.hidden, d.features * d.hidden), new.ones(d.hidden)
        self.layers = torch.nn.ModuleList(Layer(d, new) for _ in range(d.layers))
        self.norm = new.ones(d.hidden)

    def forward(self, noise, target_hidden, q_pos, k_pos, attend):
        ctx = rms_norm(F.linear(target_hidden, self.fc), self.hidden_norm)
        h = noise
        for layer in self.layers:
            h = layer(h, ctx, q_pos, k_pos, attend)
        return rms_norm(h, self.norm)


def dense_attention(d, anchors, keep, S):
    """The mask as a dense [B, 1, T, S + T] boolean tensor, through SDPA."""
    T = anchors.shape[1] * d.block
    block_of_query = torch.arange(T, device="cuda") // d.block
    key = torch.arange(S + T, device="cuda")
    anchor_of_query = anchors[:, block_of_query]  # [B, T]
    sees_context = (key[None, None, :] < S) & (key[None, None, :] < anchor_of_query[:, :, None])
    sees_block = (key[None, :] >= S) & ((key[None, :] - S) // d.block == block_of_query[:, None])
    mask = (sees_context | sees_block[None]) & keep[:, block_of_query][:, :, None]
    scale = d.head_dim ** -0.5
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=scale,
                                                          enable_gqa=True)


def flex_attention_of(d, compile_alone):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    run = torch.compile(flex_attention, dynamic=False) if compile_alone else flex_attention

    def make(anchors, keep, S):
        N = anchors.shape[1]

        def visible(b, h, q, kv):
            blk = q // d.block
            slot = torch.clamp(blk, max=N - 1)
            context = (kv < S) & (kv < anchors[b, slot])
            own_block = (kv >= S) & ((kv - S) // d.block == blk)
            return (context | own_block) & keep[b, slot] & (blk < N)

        mask = create_block_mask(visible, B=anchors.shape[0], H=None, Q_LEN=N * d.block, KV_LEN=S + N * d.block,
                                 device="cuda")
        return lambda q, k, v: run(q, k, v, block_mask=mask, enable_gqa=True, scale=d.head_dim ** -0.5)
    return make


def loss_of(model, d, frozen, batch, make_attention, loss_chunk):
    """The step's weighted cross-entropy, its logits made and dropped chunk by chunk (recomputed in backward)."""
    embed, lm_head = frozen
    ids, target_hidden, loss_mask, anchors, keep = batch
    B, S = ids.shape
    N = anchors.shape[1]
    slot = torch.arange(d.block, device="cuda")
    at = anchors[:, :, None] + slot  # [B, N, block]: the position of each draft slot
    first = torch.where(keep, torch.gather(ids, 1, anchors), torch.full_like(anchors, d.vocab - 1))
    noise_ids = torch.full((B, N, d.block), d.vocab - 1, device="cuda", dtype=torch.long)
    noise_ids[:, :, 0] = first
    noise = F.embedding(noise_ids.view(B, N * d.block), embed)
    q_pos = at.view(B, N * d.block)
    k_pos = torch.cat((torch.arange(S, device="cuda").expand(B, S), q_pos), dim=1)
    out = model(noise, target_hidden, q_pos, k_pos, make_attention(anchors, keep, S)).reshape(-1, d.hidden)
    inside = at < S
    label_at = at.clamp(max=S - 1)
    labels = torch.gather(ids, 1, label_at.view(B, -1)).view(-1)
    weight = keep[:, :, None] & inside & (slot > 0)
    weight = (weight.float() * torch.gather(loss_mask, 1, label_at.view(B, -1)).view(B, N, d.block)).view(-1)

    def chunk_loss(h, y, w):
        return (F.cross_entropy(F.linear(h, lm_head).float(), y, reduction="none") * w).sum()

    total = torch.zeros((), device="cuda")
    for r in range(0, out.shape[0], loss_chunk):
        rows = slice(r, r + loss_chunk)
        total = total + checkpoint(chunk_loss, out[rows], labels[rows], weight[rows], use_reentrant=False)
    return total / (weight.sum() + 1e-6)


def random_anchors(d, B, S, N):
    """N distinct sorted anchors in [0, S - block] a sequence, all kept."""
    scores = torch.rand(B, S - d.block + 1, device="cuda")
    anchors = scores.topk(N, dim=1).indices.sort(dim=1).values
    return anchors, torch.ones(B, N, device="cuda", dtype=torch.bool)


def step_flop(d, B, S, N):
    T = N * d.block
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    fc = 2 * 2 * S * d.features * d.hidden * d.hidden
    products = 2 * (T * d.hidden * q + 2 * (S + T) * d.hidden * kv + T * q * d.hidden + 3 * T * d.hidden * d.inter)
    attention = 3.5 * 4 * T * (S / 2 + d.block) * d.head_dim * d.heads
    head = 2 * 2 * T * d.hidden * d.vocab
    return B * (fc + d.layers * (3 * products + attention) + head)


def measure(mode, d, B, S, N, args, frozen):
    rec = {"mode": mode, "seq": S, "anchors": N, "batch": B, "layers": d.layers, "hidden": d.hidden}
    torch.manual_seed(1)
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = Drafter(d)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if mode == "sdpa":
        make_attention = lambda anchors, keep, seq: dense_attention(d, anchors, keep, seq)  # noqa: E731
    else:
        make_attention = flex_attention_of(d, compile_alone=(mode == "flex"))
    loss_fn = torch.compile(loss_of, dynamic=False) if mode == "compiled" else loss_of
    ids = torch.randint(0, d.vocab - 1, (B, S), device="cuda")
    target_hidden = torch.randn(B, S, d.features * d.hidden, device="cuda", dtype=torch.bfloat16)
    loss_mask = torch.ones(B, S, device="cuda")

    def step():
        anchors, keep = random_anchors(d, B, S, N)
        loss = loss_fn(model, d, frozen, (ids, target_hidden, loss_mask, anchors, keep), make_attention,
                       args.loss_chunk)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        start = time.perf_counter()
        for _ in range(args.warm):
            step()
        torch.cuda.synchronize()
        rec["warmup_s"] = round(time.perf_counter() - start, 2)
        times, loss = [], None
        for _ in range(args.steps):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            loss = step()
            end.record()
            times.append((begin, end))
        torch.cuda.synchronize()
        ms = sorted(b.elapsed_time(e) for b, e in times)
        median = ms[len(ms) // 2]
        rec.update(step_ms=round(median, 2), min_ms=round(ms[0], 2), loss=round(loss.item(), 4),
                   ctx_tok_per_s=round(B * S / median * 1e3), tflops=round(step_flop(d, B, S, N) / median / 1e9, 1),
                   peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    except Exception as e:  # noqa: BLE001  an out-of-memory or a compile failure is reported, not raised
        rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    del model, opt
    return rec


def main():
    args = options()
    d = Dims(args.hidden, args.inter, args.layers, args.heads, args.kv_heads, args.head_dim, args.vocab,
             args.feat_layers, args.block)
    torch.manual_seed(0)
    frozen = (torch.randn(d.vocab, d.hidden, device="cuda", dtype=torch.bfloat16) * 0.02,   # embedding
              torch.randn(d.vocab, d.hidden, device="cuda", dtype=torch.bfloat16) * 0.02)   # lm_head
    for mode in args.modes.split(","):
        for bucket in args.buckets.split(","):
            S, N = (int(x) for x in bucket.split(":"))
            print(json.dumps(measure(mode, d, args.batch, S, N, args, frozen)), flush=True)


if __name__ == "__main__":
    main()
