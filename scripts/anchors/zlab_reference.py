"""z-lab's published DFlash reference (`dflash` 0.1.0, dflash/model.py) run on one drafter export:
loads it strictly through the package's own DFlashDraftModel (no missing, unexpected or mismatched
key), decodes every prompt greedily with the package's dflash_generate (on the CPU, its CUDA timer
replaced by time.perf_counter), checks each output against the target's own greedy decoding (a plain
loop of full forwards, no cache), and writes the outputs and the tokens produced per round as JSON.
It also loads the same weights through this repository's python/export/modeling_dflash.py with
transformers' AutoModel (trust_remote_code) and checks that its forward and spec_generate agree.
Run by scripts/anchors/zlab-reference.sh inside the scratch environment holding the package."""
import argparse, importlib.metadata, json, shutil, sys, tempfile, time
from pathlib import Path

import torch
import dflash.model as zm
import transformers
from safetensors import safe_open
from transformers import AutoModel, AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[2]
MODEL_FILE = REPO / "python" / "export" / "modeling_dflash.py"
RULE = ("per round: tokens produced = min(accepted + 1, max_length - start - 1), cut after a stop token; "
        "the last verify block is shortened to the remaining budget")


def fail(message):
    sys.exit(f"zlab_reference: {message}")


def strict_load(cls, path, dtype, **kwargs):
    """cls.from_pretrained with every loading-info list empty, and exactly the file's tensor names."""
    model, info = cls.from_pretrained(path, dtype=dtype, output_loading_info=True, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        fail(f"{cls.__name__} loading {path}: {problems}")
    with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        for name in names:
            want = f.get_tensor(name).to(dtype)
            if not torch.equal(model.state_dict()[name], want):
                fail(f"{cls.__name__} loading {path}: parameter {name} differs from the file")
    if set(model.state_dict()) != names:
        fail(f"{cls.__name__} state_dict names {sorted(set(model.state_dict()) ^ names)} differ from the file's")
    return model.eval()


class MarginProbe:
    """The smallest top-2 gap over every row of every lm_head call (target's and drafter's logits)."""

    def __init__(self, head):
        self.smallest = float("inf")
        head.register_forward_hook(self.hook)

    def hook(self, module, inputs, output):
        top = output.detach().reshape(-1, output.shape[-1]).topk(2, dim=-1).values
        self.smallest = min(self.smallest, float((top[:, 0] - top[:, 1]).min()))

    def take(self):
        value, self.smallest = self.smallest, float("inf")
        return value


@torch.no_grad()
def target_greedy(target, prompt, max_new, stop_ids):
    """The target's own greedy decoding, ended after the first stop id."""
    ids = torch.tensor([prompt])
    for _ in range(max_new):
        ids = torch.cat([ids, target(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if int(ids[0, -1]) in stop_ids:
            break
    return ids[0].tolist()


def staged_export(drafter_dir, tmp):
    """The export with modeling_dflash.py and auto_map: as it is when it has them (its model file must
    be this repository's), else a copy with both added (a drafter folder without auto_map)."""
    config = json.loads((Path(drafter_dir) / "config.json").read_text())
    if "auto_map" in config:
        if (Path(drafter_dir) / "modeling_dflash.py").read_bytes() != MODEL_FILE.read_bytes():
            fail(f"{drafter_dir}/modeling_dflash.py differs from {MODEL_FILE}; re-export the drafter")
        return Path(drafter_dir)
    staged = Path(tmp) / "export"
    staged.mkdir()
    shutil.copy(Path(drafter_dir) / "model.safetensors", staged)
    shutil.copy(MODEL_FILE, staged)
    config["auto_map"] = {"AutoModel": "modeling_dflash.DFlashDraftModel"}
    (staged / "config.json").write_text(json.dumps(config, indent=2))
    return staged


@torch.no_grad()
def check_model_file(reference, ours, target, dtype):
    """Our class against the package's on one random block over a random context (no cache)."""
    if type(ours).__module__.split(".")[-1] != "modeling_dflash" or type(ours).__name__ != "DFlashDraftModel":
        fail(f"AutoModel gave {type(ours).__module__}.{type(ours).__name__}, not modeling_dflash.DFlashDraftModel")
    g = torch.Generator().manual_seed(0)
    h = target.config.hidden_size
    context = torch.randn(1, 9, len(reference.target_layer_ids) * h, generator=g, dtype=dtype)
    block = torch.randint(0, target.config.vocab_size, (1, reference.block_size), generator=g)
    noise = target.get_input_embeddings()(block)
    positions = torch.arange(9 + reference.block_size)[None]
    want = reference(target_hidden=context, noise_embedding=noise, position_ids=positions)
    got = ours(noise, context, positions)
    error = float((got - want).abs().max() / want.abs().max())
    if error > 1e-5:
        fail(f"modeling_dflash.py's forward differs from the package's: relative error {error:.3g}")
    return error


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--drafter", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--stop-token-ids", default="", help="comma-separated stop ids (default: none)")
    p.add_argument("--expect-produced", help="a JSON file whose cases[i].produced_per_round and tau must match")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write --out (the default)")
    mode.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = p.parse_args()

    zm._cuda_time = time.perf_counter  # dflash_generate's timer calls torch.cuda.synchronize
    transformers.utils.logging.disable_progress_bar()
    dtype = getattr(torch, args.dtype)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype, attn_implementation="sdpa").eval()
    drafter = strict_load(zm.DFlashDraftModel, args.drafter, dtype, attn_implementation="sdpa")
    probe = MarginProbe(target.get_output_embeddings())
    prompts = [json.loads(line)["input_ids"] for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    stop_ids = [int(x) for x in args.stop_token_ids.split(",") if x.strip()]

    with tempfile.TemporaryDirectory() as tmp:
        ours = strict_load(AutoModel, staged_export(args.drafter, tmp), dtype, trust_remote_code=True)
        forward_error = check_model_file(drafter, ours, target, dtype)
        cases = []
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([prompt])
            probe.take()
            res = zm.dflash_generate(drafter, target, ids, args.max_new_tokens, stop_token_ids=stop_ids or None,
                                     temperature=0.0, return_stats=True)
            margin = probe.take()
            output, produced = res.output_ids[0].tolist(), [int(x) for x in res.acceptance_lengths]
            greedy = target_greedy(target, prompt, args.max_new_tokens, stop_ids)
            if output != greedy:
                fail(f"prompt {i}: dflash_generate's output {output} is not the target's greedy {greedy}")
            mine, mine_produced = ours.spec_generate(target, ids, args.max_new_tokens, stop_ids)
            if mine[0].tolist() != output or mine_produced != produced:
                fail(f"prompt {i}: modeling_dflash.py's spec_generate gives {mine[0].tolist()} {mine_produced}, "
                     f"the package {output} {produced}")
            # A prompt whose prefill token is a stop id has no round and no tau.
            cases.append({"prompt": prompt, "output_ids": output, "produced_per_round": produced,
                          "tau": sum(produced) / len(produced) if produced else None,
                          "equals_target_greedy": True, "min_margin": round(margin, 6)})
            print(f"{args.name} prompt {i}: {len(produced)} rounds, tau {cases[-1]['tau']}, "
                  f"min margin {margin:.4g}")
    rounds = [n for c in cases for n in c["produced_per_round"]]
    taus = [c["tau"] for c in cases if c["tau"] is not None]  # the mean over prompts that had a round
    result = {
        "reference": f"z-lab dflash {importlib.metadata.version('dflash')} "
                     f"(package registry), dflash/model.py dflash_generate, greedy, {args.dtype}, "
                     f"torch {torch.__version__.split('+')[0]}, transformers {transformers.__version__}",
        "rule": RULE,
        "target": args.target, "drafter": args.drafter, "prompts": args.prompts,
        "block_size": drafter.block_size, "max_new_tokens": args.max_new_tokens, "stop_token_ids": stop_ids,
        "tau": sum(taus) / len(taus), "tau_micro": sum(rounds) / len(rounds),
        "min_margin": min(c["min_margin"] for c in cases),
        "cases": cases,
    }
    print(f"{args.name}: tau {result['tau']:.6f}, micro {result['tau_micro']:.6f}, "
          f"min margin {result['min_margin']:.4g}, modeling_dflash.py forward rel. error {forward_error:.3g}")

    if args.expect_produced:
        want = json.loads(Path(args.expect_produced).read_text())
        got = [c["produced_per_round"] for c in cases]
        if got != [c["produced_per_round"] for c in want["cases"]] or abs(result["tau"] - want["tau"]) > 1e-12:
            fail(f"the rounds differ from {args.expect_produced}: tau {result['tau']} vs {want['tau']}")
        print(f"{args.name}: every round's count and tau equal {args.expect_produced}")
    text = json.dumps(result, indent=1) + "\n"
    if args.check:
        if Path(args.out).read_text() != text:
            fail(f"{args.out} differs from what the reference computes now")
        print(f"{args.name}: {args.out} is what the reference computes")
    else:
        Path(args.out).write_text(text)
        print(f"{args.name}: wrote {args.out}")


if __name__ == "__main__":
    main()
