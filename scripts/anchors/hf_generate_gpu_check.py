"""Greedy `dflash-train generate` on a GPU (bf16) against Hugging Face transformers' greedy `generate` on
the same random Qwen3 target at Qwen3-8B dims, written by transformers itself (scripts/gpu-test.sh's
generate-hf step; torch and transformers are the GPU host's). Prompts of different lengths, more of them
than slots, so slots are refilled; exit status 1 when a check fails, naming the prompt and position:
- free-running: each of our outputs (batch 3) equals HF's greedy output of that prompt alone, up to the
  first position where HF's top-2 logit margin is within bf16 noise (2^-5 of max(1, |top logit|), the
  rule of the speculative decoder's lossless check, docs/MODEL.md);
- teacher-forced: every one of our tokens is the argmax of HF's forward over the prompt and our own
  output, or within that margin of it (this one checks every token, past the first near-tie too);
- batch 1 against batch 3: equal up to the first position where HF's margin along our output is within
  bf16 noise (the decode step's GEMMs sum a batch's rows together, so a near-tie may round either way);
- every output has the --max-new-tokens tokens and "finish": "length" (no stop ids).
--dims tiny --device cpu --dtype float32 runs the same checks on a small target on the CPU (the
script's own check, where torch is installed)."""
import argparse, json, subprocess, sys, tempfile, time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen3Config

DIMS = {
    "qwen3-8b": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, max_position_embeddings=40960),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=4096),
}
PROMPT_LENGTHS = [1, 7, 33, 96, 200, 333, 512, 64]


def tolerance(logit):
    """bf16 noise in a top-2 margin: 2^-5 of max(1, |logit|) (train/spec_eval.cpp's bf16_margin_tolerance)."""
    return max(1.0, abs(logit)) / 32.0


def write_target(folder, dims, layers, seed, dtype, device, init_std):
    config = Qwen3Config(**DIMS[dims], num_hidden_layers=layers, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, initializer_range=init_std, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    model.save_pretrained(folder)
    return model


def run_ours(dflash_train, work, target, prompts, max_new, batch, device):
    toml = work / f"generate-{batch}.toml"
    toml.write_text(
        f'[job]\ndump_folder = "{work / "dump"}"\n[target]\npath = "{target}"\n'
        f'[drafter]\nmask_token_id = 0\n[data]\ntrain = "unused.jsonl"\n'
        f'[runtime]\ndevices = "{"cuda:0" if device == "cuda" else "cpu"}"\n'
        f'[eval]\nspec_ignore_eos = true\n[[buckets]]\nseq = 32\nanchors = 4\nbatch = 1\n')
    out = work / f"generated-{batch}.jsonl"
    cmd = [dflash_train, "generate", "--config", str(toml), "--prompts", str(prompts), "--output", str(out),
           "--max-new-tokens", str(max_new), "--batch", str(batch)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hf_generate_gpu_check: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    lines = out.read_text().splitlines()
    header, records = json.loads(lines[0]), [json.loads(l) for l in lines[1:]]
    print(f"ours, batch {batch}: {len(records)} records in {time.time() - t0:.1f} s (precision {header.get('precision')})")
    return {r["id"]: r for r in records}


@torch.no_grad()
def hf_free_running(model, prompt, max_new, device):
    ids = torch.tensor([prompt], device=device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, len(prompt):].tolist()
    tops = [out.logits[k][0].float().topk(2).values.tolist() for k in range(len(tokens))]
    return tokens, [(t[0], t[0] - t[1]) for t in tops]


@torch.no_grad()
def hf_teacher_forced(model, prompt, output, device):
    """HF's logits at every position that chose one of output's tokens: (argmax, top logit, how far output[k]
    lies below the top, top-2 margin)."""
    seq = torch.tensor([prompt + output[:-1]], device=device)
    logits = model(seq).logits[0, len(prompt) - 1:].float()
    rows = []
    for k, token in enumerate(output):
        top2 = logits[k].topk(2)
        best, top = int(top2.indices[0]), float(top2.values[0])
        rows.append((best, top, top - float(logits[k][token]), float(top2.values[0] - top2.values[1])))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dflash-train", default="build/dflash-train")
    p.add_argument("--dims", choices=sorted(DIMS), default="qwen3-8b")
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--work", help="scratch folder (default: a new temporary one, removed at the end)")
    a = p.parse_args()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    scratch = None if a.work else tempfile.TemporaryDirectory(prefix="hf-generate-gpu-")
    work = Path(a.work or scratch.name)
    work.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, a.dtype)

    t0 = time.time()
    model = write_target(work / "target", a.dims, a.layers, a.seed, dtype, a.device, a.init_std)
    vocab = model.config.vocab_size
    print(f"target: random Qwen3, {a.dims} dims, {a.layers} layers, {a.dtype}, init std {a.init_std}, "
          f"written by transformers {transformers.__version__} in {time.time() - t0:.1f} s")
    g = torch.Generator().manual_seed(a.seed + 1)
    prompts = {f"p{i}": torch.randint(0, vocab, (n,), generator=g).tolist() for i, n in enumerate(PROMPT_LENGTHS)}
    prompts_file = work / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"id": k, "prompt_ids": v}) + "\n" for k, v in prompts.items()))

    ours = {b: run_ours(a.dflash_train, work, work / "target", prompts_file, a.max_new_tokens, b, a.device) for b in (3, 1)}
    failures, compared, flips, batch_compared = [], 0, 0, 0
    for pid, prompt in prompts.items():
        rec = {b: ours[b].get(pid) for b in ours}
        if any(r is None for r in rec.values()):
            failures.append(f"{pid}: missing from an output file")
            continue
        for b, r in rec.items():
            if r["prompt_ids"] != prompt or len(r["output_ids"]) != a.max_new_tokens or r["finish"] != "length":
                failures.append(f"{pid} (batch {b}): {len(r['output_ids'])} tokens, finish {r['finish']!r}; wanted "
                                f"{a.max_new_tokens} and 'length' after the prompt given")
        mine = rec[3]["output_ids"]
        hf, margins = hf_free_running(model, prompt, a.max_new_tokens, a.device)
        n = 0
        for k, (top, margin) in enumerate(margins[:len(mine)]):
            if margin <= tolerance(top):
                break
            if mine[k] != hf[k]:
                failures.append(f"{pid}: new token {k} is {mine[k]}, HF's greedy gives {hf[k]} (HF's top-2 margin "
                                f"{margin:.4g} > bf16 noise {tolerance(top):.4g})")
                break
            n += 1
        compared += n
        forced = hf_teacher_forced(model, prompt, mine, a.device)
        not_argmax = 0
        for k, (best, top, behind, _) in enumerate(forced):
            if mine[k] != best:
                not_argmax += 1
                if behind > tolerance(top):
                    failures.append(f"{pid}: new token {k} is {mine[k]}, {behind:.4g} below HF's argmax {best} "
                                    f"(bf16 noise {tolerance(top):.4g})")
        m = 0
        flips += not_argmax
        for k, (_, top, _, margin) in enumerate(forced[:len(rec[1]["output_ids"])]):
            if margin <= tolerance(top):
                break
            if rec[1]["output_ids"][k] != mine[k]:
                failures.append(f"{pid}: batch 1 gives {rec[1]['output_ids'][k]} at new token {k}, batch 3 {mine[k]} "
                                f"(HF's margin there {margin:.4g} > bf16 noise {tolerance(top):.4g})")
                break
            m += 1
        batch_compared += m
        print(f"{pid}: prompt {len(prompt)}, free-running equal to HF for {n} tokens before a near-tie; "
              f"batch 1 = batch 3 for {m}; {not_argmax} of "
              f"{len(mine)} tokens not HF's argmax (each within bf16 noise unless listed below)")
    total = len(prompts) * a.max_new_tokens
    summary = {"check": "hf-generate-gpu", "dims": a.dims, "layers": a.layers, "dtype": a.dtype, "device": a.device,
               "prompts": len(prompts), "new_tokens": total, "free_running_equal_before_near_tie": compared,
               "teacher_forced_not_argmax": flips, "batch1_equal_before_near_tie": batch_compared,
               "transformers": transformers.__version__, "torch": torch.__version__, "failures": len(failures)}
    print(json.dumps(summary))
    for f in failures:
        print("FAILED:", f)
    if scratch:
        scratch.cleanup()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
