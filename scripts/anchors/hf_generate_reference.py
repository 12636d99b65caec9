"""Hugging Face transformers' greedy `generate` on a batch of prompts of different lengths (left-padded,
with the attention mask), the golden outputs `dflash-train generate` must reproduce token for token
(tests/golden/generate-hf/README.md). Each output is checked against the same prompt generated alone
(no padding) and against it in float64, and the smallest top-2 logit margin over every generated
token is recorded. Run by scripts/anchors/hf-generate-reference.sh inside its scratch environment."""
import argparse, json, sys, zlib
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM


def fail(message):
    sys.exit(f"hf_generate_reference: {message}")


def crc32_of(target_dir, name):
    """CRC-32 (8 hex digits) of a tensor's bytes as stored, as model/target.h's target_checksums."""
    with safe_open(str(Path(target_dir) / "model.safetensors"), "pt") as f:
        data = f.get_tensor(name).contiguous().numpy().tobytes()
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


@torch.no_grad()
def generate(model, prompts, max_new, stop_ids, pad_id):
    """One batched greedy generate over left-padded prompts: per prompt its new tokens (cut after the
    first stop id), finish, and the smallest top-2 margin of the logits that chose them."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                         eos_token_id=stop_ids or None, pad_token_id=pad_id, output_logits=True,
                         return_dict_in_generate=True)
    results = []
    for row in range(len(prompts)):
        new = out.sequences[row, width:].tolist()
        finish = "length"
        for k, token in enumerate(new):
            if token in stop_ids:
                new, finish = new[:k + 1], "stop"
                break
        new = new[:max_new]
        margin = float("inf")
        for k in range(len(new)):
            top = out.logits[k][row].topk(2).values
            margin = min(margin, float(top[0] - top[1]))
        results.append({"output_ids": new, "finish": finish, "min_margin": margin})
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="the tiny target's Hugging Face folder")
    p.add_argument("--prompts", required=True, help="JSONL, {\"id\", \"prompt_ids\"} per line")
    p.add_argument("--out", required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--stop-token-ids", default="", help="comma-separated stop ids (default: none)")
    p.add_argument("--target-label", help="how the output names the target (default: --target)")
    p.add_argument("--pad-id", type=int, default=0, help="the id left padding uses (masked out)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write --out (the default)")
    mode.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = p.parse_args()

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    records = [json.loads(line) for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    prompts = [r["prompt_ids"] for r in records]
    stop_ids = [int(x) for x in args.stop_token_ids.split(",") if x.strip()]
    models = {dtype: AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype, attn_implementation="eager").eval()
              for dtype in (torch.float32, torch.float64)}
    batched = generate(models[torch.float32], prompts, args.max_new_tokens, stop_ids, args.pad_id)
    # The checks run each prompt alone: float64 with left padding gives NaN rows in eager attention
    # (two finfo.min terms overflow), so the float64 run has no padding at all.
    for i, prompt in enumerate(prompts):
        alone = generate(models[torch.float32], [prompt], args.max_new_tokens, stop_ids, args.pad_id)[0]
        if alone["output_ids"] != batched[i]["output_ids"]:
            fail(f"prompt {records[i]['id']}: batched {batched[i]['output_ids']} but alone {alone['output_ids']}")
        wide = generate(models[torch.float64], [prompt], args.max_new_tokens, stop_ids, args.pad_id)[0]
        if wide["output_ids"] != batched[i]["output_ids"]:
            fail(f"prompt {records[i]['id']}: float32 {batched[i]['output_ids']} but float64 {wide['output_ids']}")
    cases = [{"id": r["id"], "prompt_ids": r["prompt_ids"], "output_ids": b["output_ids"], "finish": b["finish"],
              "min_margin": round(b["min_margin"], 6)} for r, b in zip(records, batched)]
    result = {
        "reference": f"transformers {transformers.__version__} AutoModelForCausalLM.generate, greedy "
                     f"(do_sample=False), float32, attn_implementation eager, one batch left-padded with "
                     f"id {args.pad_id} and its attention mask; torch {torch.__version__.split('+')[0]}, CPU",
        "target": args.target_label or args.target,
        "target_checksums": {"embed_tokens": crc32_of(args.target, "model.embed_tokens.weight"),
                             "lm_head": crc32_of(args.target, "lm_head.weight")},
        "max_new_tokens": args.max_new_tokens,
        "stop_token_ids": stop_ids,
        "min_margin": min(c["min_margin"] for c in cases),
        "cases": cases,
    }
    for c in cases:
        print(f"{c['id']}: {len(c['prompt_ids'])} + {len(c['output_ids'])} tokens ({c['finish']}), "
              f"min margin {c['min_margin']:.4g}")
    text = json.dumps(result, indent=1) + "\n"
    if args.check:
        if Path(args.out).read_text() != text:
            fail(f"{args.out} differs from what transformers computes now")
        print(f"{args.out} is what transformers computes")
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
