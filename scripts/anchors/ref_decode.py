"""Anchor for `dflash-bench spec`: HF transformers' greedy one-token decode step of a
target at Qwen3-8B dimensions (random bf16 weights, sdpa attention) on top of a KV cache holding
a prompt of each given length; with --compile, the same step under torch.compile (reported with
its warm-up time). One JSON line per context. Usage: ref_decode.py 1024,4096 [--compile]"""
import json, sys, time
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

try:
    from transformers import StaticCache
except ImportError:  # very old or very new transformers: fall back to the dynamic cache
    StaticCache = None
from transformers import DynamicCache

cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                  max_position_embeddings=40960, tie_word_embeddings=False)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
compile_step = "--compile" in sys.argv[2:]
STEPS = 20


def make_cache(length):
    """A static cache of `length` positions when this transformers has one, else a dynamic one."""
    if StaticCache is not None:
        for kw in (dict(config=cfg, max_cache_len=length),
                   dict(config=cfg, max_batch_size=1, max_cache_len=length, device="cuda", dtype=torch.bfloat16)):
            try:
                return StaticCache(**kw), "static"
            except TypeError:
                pass
    return DynamicCache(), "dynamic"


def step(tok, cache, pos):
    out = model(tok, past_key_values=cache, use_cache=True, cache_position=pos)
    return out.logits[:, -1:].argmax(-1)


compiled = torch.compile(step, mode="reduce-overhead") if compile_step else None


def run(tok, cache, pos):
    """One decode step; compiled, each call is a new CUDA-graph step and its output is copied out
    (the graph's output buffer is overwritten by the next replay)."""
    if compiled is None:
        return step(tok, cache, pos)
    torch.compiler.cudagraph_mark_step_begin()
    return compiled(tok, cache, pos).clone()

for S in [int(x) for x in sys.argv[1].split(",")]:
    cache, kind = make_cache(S + STEPS + 8)
    ids = torch.randint(0, 151000, (1, S), device="cuda")
    with torch.no_grad():
        out = model(ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(S, device="cuda"))
        tok = out.logits[:, -1:].argmax(-1)
        t0 = time.time()
        pos = S
        for _ in range(3):  # warm-up (and, compiled, the compilation)
            tok = run(tok, cache, torch.tensor([pos], device="cuda"))
            pos += 1
        torch.cuda.synchronize()
        warmup_s = time.time() - t0
        ts = []
        for _ in range(STEPS - 3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            p = torch.tensor([pos], device="cuda")
            a.record(); tok = run(tok, cache, p); b.record(); torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
            pos += 1
    ts.sort()
    print(json.dumps({"anchor": "hf-decode-step", "compiled": compile_step, "cache": kind, "context": S,
                      "step_ms": round(ts[len(ts) // 2], 3), "min_ms": round(ts[0], 3),
                      "warmup_s": round(warmup_s, 2)}), flush=True)
