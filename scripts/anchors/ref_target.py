"""The PyTorch anchor of `dflash-bench target`: HF transformers' forward of a Qwen3 target at
Qwen3-8B's dimensions (random bf16 weights, sdpa attention), all hidden states returned, as online
DFlash training runs it once a step. Per sequence length: two untimed forwards, then --reps timed by
CUDA events; fwd_ms is their median. tflops_approx counts 2 x 8.19e9 (the non-embedding parameters)
x tokens, attention not included (dflash-bench target prints the same count beside its own).

Prints one JSON line per length: target, seq, fwd_ms, tflops_approx, peak_gib.
  python3 scripts/anchors/ref_target.py 1024,4096,16384 [--reps 5]
"""
import argparse
import json

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                max_position_embeddings=40960, tie_word_embeddings=False)
PARAMS = 8.19e9  # Qwen3-8B's parameters outside the embedding


def random_target():
    config = Qwen3Config(**QWEN3_8B)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 directly: no f32 copy of 8B weights
    try:
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.to(torch.bfloat16).eval()


def timed_ms(fn):
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lengths", help="sequence lengths, comma-separated: 1024,4096,16384")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    model = random_target()
    for S in (int(x) for x in args.lengths.split(",")):
        ids = torch.randint(0, 151000, (1, S), device="cuda")
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            forward = lambda: model.model(ids, output_hidden_states=True)  # noqa: E731
            for _ in range(2):
                forward()
            torch.cuda.synchronize()
            ms = sorted(timed_ms(forward) for _ in range(args.reps))
        median = ms[len(ms) // 2]
        print(json.dumps({"target": "qwen3-8b-dims", "seq": S, "fwd_ms": round(median, 2),
                          "tflops_approx": round(2 * PARAMS * S / median / 1e9, 1),
                          "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)


if __name__ == "__main__":
    main()
