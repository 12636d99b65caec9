# The DFlash drafter for Hugging Face transformers, written by `dflash-train export` beside an export's
# config.json (whose auto_map names DFlashDraftModel), so that
# transformers.AutoModel.from_pretrained(export_dir, trust_remote_code=True) loads it.
"""DFlash drafter (PyTorch): the math of dflash.cpp's drafter (docs/MODEL.md, "The drafter forward")
with parameter names equal to model.safetensors' (no `model.` prefix, no embedding, no lm_head: the
drafter uses the target's). Also a greedy speculative decoder with the reference's counting rule.

Invariants:
- state_dict() holds exactly the exported tensors; RoPE frequencies are computed, never stored.
- A block's queries see every context position before the block and the whole block (no causal mask).
- RMSNorm and RoPE run in at least float32 (float64 stays float64); matmuls run in the model's dtype.
"""
import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel, Qwen3Config


def _dflash_value(config, name, default=None):
    """A DFlash field: dflash_config's entry when present, else the top-level attribute."""
    block = getattr(config, "dflash_config", None) or {}
    return block.get(name, getattr(config, name, default))


class DFlashRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        wide = x if x.dtype == torch.float64 else x.float()
        y = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def _rope_tables(positions, head_dim, theta, dtype):
    """cos and sin [B, P, head_dim] for positions [B, P] (rotate-half layout, theta^(-2i/hd))."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=wide) / head_dim))
    angles = positions.to(wide)[..., None] * inv
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _apply_rope(x, cos, sin):
    """x [B, heads, P, hd]; cos, sin [B, P, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


class DFlashAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or h // self.heads
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.q_norm = DFlashRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = DFlashRMSNorm(self.head_dim, config.rms_norm_eps)

    def context_kv(self, context, cos, sin):
        """K (normed, rotated) and V of context rows [B, S, H]: [B, kv_heads, S, hd] each."""
        b, s, _ = context.shape
        k = self.k_norm(self.k_proj(context).view(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(context).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        return _apply_rope(k, cos, sin), v

    def forward(self, x, block_cos, block_sin, context_k, context_v):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        q = _apply_rope(q, block_cos, block_sin)
        k_block, v_block = self.context_kv(x, block_cos, block_sin)
        k = torch.cat([context_k, k_block], dim=2)
        v = torch.cat([context_v, v_block], dim=2)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim**-0.5
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class DFlashMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DFlashAttention(config)
        self.post_attention_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = DFlashMLP(config)

    def forward(self, h, block_cos, block_sin, context_k, context_v):
        h = h + self.self_attn(self.input_layernorm(h), block_cos, block_sin, context_k, context_v)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashContextCache:
    """Per layer, the K/V of the context positions seen so far (0..length-1). Context never rolls
    back: only committed positions are appended; a block's own K/V are never stored."""

    def __init__(self):
        self.keys, self.values = [], []

    @property
    def length(self):
        return self.keys[0].shape[2] if self.keys else 0

    def append(self, layer, k, v):
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)


class DFlashDraftModel(PreTrainedModel):
    """fc, hidden_norm, layers.{l}.*, norm: context features of the target's layers
    dflash_config.target_layer_ids feed every layer's keys and values; a block of block_size tokens
    ([last committed token, mask, ..., mask], embedded by the target) is drafted in one pass."""

    config_class = Qwen3Config
    base_model_prefix = "model"
    _no_split_modules = ["DFlashDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)
        self.target_layer_ids = list(_dflash_value(config, "target_layer_ids"))
        self.block_size = int(_dflash_value(config, "block_size", 16))
        self.mask_token_id = int(_dflash_value(config, "mask_token_id"))
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rope = getattr(config, "rope_parameters", None) or {}
        self.rope_theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
        h = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = DFlashRMSNorm(h, config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = DFlashRMSNorm(h, config.rms_norm_eps)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=getattr(self.config, "initializer_range", 0.02))
        elif isinstance(module, DFlashRMSNorm):
            nn.init.ones_(module.weight)

    def context_features(self, hidden_states):
        """The drafter's context input from a target's output_hidden_states=True: the outputs of
        layers target_layer_ids (HF's hidden_states[l + 1]), concatenated: [B, S, F*H]."""
        return torch.cat([hidden_states[l + 1] for l in self.target_layer_ids], dim=-1)

    def forward(self, noise_embedding, target_hidden, position_ids=None, context_cache=None):
        """noise_embedding [B, T, H]: the block, embedded by the target. target_hidden [B, S, F*H]:
        context features of positions not yet in context_cache (all of them without a cache).
        position_ids [B, S + T]: those context positions, then the block's (default 0..S+T-1).
        Returns the final-normed hidden states [B, T, H]; logits are the target's lm_head of them."""
        b, t, _ = noise_embedding.shape
        s = target_hidden.shape[1]
        if position_ids is None:
            start = context_cache.length if context_cache is not None else 0
            position_ids = torch.arange(start, start + s + t, device=noise_embedding.device).expand(b, -1)
        dtype = noise_embedding.dtype
        ctx_cos, ctx_sin = _rope_tables(position_ids[:, :s], self.head_dim, self.rope_theta, dtype)
        blk_cos, blk_sin = _rope_tables(position_ids[:, s:], self.head_dim, self.rope_theta, dtype)
        context = self.hidden_norm(self.fc(target_hidden))
        h = noise_embedding
        for i, layer in enumerate(self.layers):
            k, v = layer.self_attn.context_kv(context, ctx_cos, ctx_sin)
            if context_cache is not None:
                context_cache.append(i, k, v)
                k, v = context_cache.keys[i], context_cache.values[i]
            h = layer(h, blk_cos, blk_sin, k, v)
        return self.norm(h)

    @torch.no_grad()
    def spec_generate(self, target, input_ids, max_new_tokens, stop_token_ids=None, block_size=None):
        """Greedy speculative decoding, batch 1 (docs/MODEL.md, "Speculative decoding").
        Returns (output ids [1, n + new], tokens produced per round). A round produces
        min(a + 1, n + max_new - start - 1) tokens, cut after a stop token; the last verify block is
        shortened to the budget left. The output equals the target's own greedy decoding."""
        from transformers import DynamicCache

        bs = int(block_size or self.block_size)
        dev = input_ids.device
        n = input_ids.shape[1]
        end = n + max_new_tokens
        stops = set(int(x) for x in (stop_token_ids or []))
        out = torch.full((1, end + 1), self.mask_token_id, dtype=torch.long, device=dev)
        out[:, :n] = input_ids
        positions = torch.arange(end + 1, device=dev)[None]
        cache = DynamicCache()
        res = target(input_ids, position_ids=positions[:, :n], past_key_values=cache, use_cache=True,
                     output_hidden_states=True)
        out[0, n] = res.logits[0, -1].argmax()
        features = self.context_features(res.hidden_states)
        drafter_cache = DFlashContextCache()
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        produced_per_round, start = [], n
        stopped = int(out[0, n]) in stops
        while start + 1 < end and not stopped:
            size = min(bs, end - start)
            block = out[:, start:start + size].clone()
            if size > 1:
                hidden = self(embed(block), features,
                              positions[:, start - features.shape[1]:start + size], drafter_cache)
                block[:, 1:] = head(hidden[:, 1:]).argmax(-1)
            res = target(block, position_ids=positions[:, start:start + size], past_key_values=cache,
                         use_cache=True, output_hidden_states=True)
            choice = res.logits[0].argmax(-1)
            a = 0
            while a < size - 1 and int(block[0, a + 1]) == int(choice[a]):
                a += 1
            out[0, start:start + a + 1] = block[0, :a + 1]
            out[0, start + a + 1] = choice[a]
            produced = min(a + 1, end - start - 1)
            for i in range(produced):
                if int(out[0, start + 1 + i]) in stops:
                    produced, stopped = i + 1, True
                    break
            start += produced
            if cache.get_seq_length() > start:  # a negative crop removes that many positions
                cache.crop(start - cache.get_seq_length())
            features = self.context_features(res.hidden_states)[:, :produced]
            produced_per_round.append(produced)
        return out[:, :min(start + 1, end)], produced_per_round
