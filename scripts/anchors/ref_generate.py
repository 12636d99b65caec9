"""Anchor for `dflash-bench generate`: HF transformers' greedy `generate` of a target at Qwen3-8B
dimensions (random bf16 weights, sdpa attention) for a batch of random prompts, every sequence
decoding the same number of new tokens (no stop id), with a static KV cache; eager (compilation
disabled) or, with --compile, with transformers' own compiled decoding (reported with its warm-up).
Decode time excludes the prefill: a run of N new tokens minus a run of 1 new token on the same
prompts, so tokens/s = batch x (N - 1) / decode time. One JSON line per batch.
Usage: ref_generate.py 1,32,128 [--prompt 512] [--new 512] [--compile]"""
import argparse
import json
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

p = argparse.ArgumentParser()
p.add_argument("batches")
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--new", type=int, default=512)
p.add_argument("--compile", action="store_true")
a = p.parse_args()

cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                  max_position_embeddings=40960, tie_word_embeddings=False)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
mode = "compiled" if a.compile else "eager"


def generate(ids, new):
    """Greedy, exactly `new` tokens a sequence, on a static cache; compilation off unless --compile."""
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
              cache_implementation="static", attention_mask=torch.ones_like(ids))
    if not a.compile:
        kw["disable_compile"] = True
    torch.cuda.synchronize()
    t0 = time.time()
    with torch.no_grad():
        out = model.generate(ids, **kw)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + new, f"generated {out.shape[1] - ids.shape[1]} tokens, not {new}"
    return time.time() - t0


for B in [int(x) for x in a.batches.split(",")]:
    r = {"anchor": "hf-generate", "mode": mode, "batch": B, "prompt": a.prompt, "new_tokens": a.new,
         "cache": "static", "transformers": transformers.__version__, "torch": torch.__version__}
    try:
        ids = torch.randint(0, 151000, (B, a.prompt), device="cuda")
        t0 = time.time()
        # Warm-up. Compiled: the decode step is compiled for the static cache's length (prompt + new),
        # so the warm-up decodes the timed length; a shorter one leaves a recompilation inside the timing.
        warm = a.new if a.compile else 8
        generate(ids, warm)
        generate(ids, warm)
        r["warmup_s"] = round(time.time() - t0, 1)
        prefill = min(generate(ids, 1) for _ in range(2))
        whole = generate(ids, a.new)
        decode = whole - prefill
        r.update(prefill_s=round(prefill, 4), decode_s=round(decode, 4),
                 step_ms=round(decode / (a.new - 1) * 1e3, 3),
                 tokens_per_s=round(B * (a.new - 1) / decode, 1),
                 peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    except Exception as e:  # noqa: BLE001 -- an anchor that fails is reported, not fatal
        r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    print(json.dumps(r), flush=True)
    torch.cuda.empty_cache()
