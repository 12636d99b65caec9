"""`dflash-data bench`: a trained drafter measured on the prompts drafters are compared on (gsm8k,
math500, humaneval, mbpp, mt-bench), as z-lab's `dflash` benchmark builds them. Each prompt goes
through the target's chat template, the C++ `dflash-train spec` decodes it greedily with the
drafter and by the target alone, and the figures are printed per dataset and overall, and written
to a JSON report. mt-bench's second turn follows the target's own first answer."""

import json
import sys
import tempfile
from pathlib import Path

from dflash_data import bench_chat, bench_datasets, bench_figures, bench_spec
from dflash_data.bench_datasets import DATASETS, BenchInputError
from dflash_data.bench_spec import SpecFailed

DEFAULT_MAX_NEW_TOKENS = 2048  # z-lab's benchmark default


def register(sub):
    p = sub.add_parser("bench", help="measure a drafter on gsm8k, math500, humaneval, mbpp and mt-bench",
                       description=__doc__)
    p.add_argument("--config", required=True, help="the training config (TOML): its target.path is the target")
    p.add_argument("--drafter", required=True, help="an exported drafter or a checkpoints/step-N folder")
    p.add_argument("--datasets", default=",".join(DATASETS),
                   help=f"comma-separated, from {', '.join(DATASETS)} (default: all)")
    p.add_argument("--data-dir", type=Path,
                   help="local copies: <name>.jsonl, .json or .parquet per dataset, rows as on the hub; "
                        "a dataset without one is loaded from the hub")
    p.add_argument("--limit", type=int, help="at most N rows per dataset (z-lab's seeded choice; default: all)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"new tokens per turn (default {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--reasoning", nargs="?", const="on", choices=("on", "off"),
                   help="pass enable_thinking=True (on, the default of a bare --reasoning) or False (off) to the "
                        "chat template; without it, nothing is passed, as in z-lab's benchmark")
    p.add_argument("--report", type=Path, help="write the figures and settings to this JSON file")
    p.add_argument("--dflash-train", dest="dflash_train",
                   help="the dflash-train binary (default: <repo>/build/dflash-train, else on PATH)")
    p.add_argument("--work-dir", type=Path,
                   help="keep the prompt and output files of every spec run here (default: a temporary folder)")
    p.set_defaults(run=run)


def read_config(path: Path) -> tuple[Path, dict]:
    """The config's target.path (relative to the current folder, as for dflash-train) and [eval]."""
    try:
        import tomllib as toml_reader
    except ImportError:  # Python 3.10: tomlkit reads the same documents
        import tomlkit as toml_reader
    if not path.is_file():
        raise BenchInputError(f"--config {path}: no such file")
    try:
        config = toml_reader.loads(path.read_text(encoding="utf-8"))
    except Exception as e:
        raise BenchInputError(f"--config {path}: not valid TOML ({e})") from e
    target = config.get("target", {}).get("path")
    if not isinstance(target, str) or not target:
        raise BenchInputError(f"--config {path}: target.path is not set; it must name the target's Hugging Face "
                              "directory")
    return Path(target), dict(config.get("eval", {}))


def check_arguments(args) -> list[str]:
    names = bench_datasets.parse_dataset_names(args.datasets)
    if args.limit is not None and args.limit < 1:
        raise BenchInputError(f"--limit {args.limit}: it must be at least 1")
    if args.max_new_tokens < 1:
        raise BenchInputError(f"--max-new-tokens {args.max_new_tokens}: it must be at least 1")
    if not Path(args.drafter).is_dir():
        raise BenchInputError(f"--drafter {args.drafter}: no such folder; pass an exported drafter or a "
                              "checkpoints/step-N folder")
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise BenchInputError(f"--data-dir {args.data_dir}: no such folder")
    return names


class Benchmark:
    """One bench run: the tokenizer, the binary and the settings shared by every dataset."""

    def __init__(self, args, target_dir: Path, eval_section: dict, work_dir: Path):
        self.args = args
        self.target_dir = target_dir
        self.work_dir = work_dir
        self.binary = bench_spec.find_dflash_train(args.dflash_train)
        self.tokenizer = bench_chat.load_target_tokenizer(target_dir)
        if args.reasoning:
            bench_chat.check_reasoning_switch(self.tokenizer, target_dir)
        self.vocab_size = bench_chat.target_vocab_size(target_dir)
        self.stop_ids = bench_chat.stop_token_ids(target_dir, eval_section)

    def prompt_ids(self, messages: list[dict], where: str) -> list[int]:
        text = bench_chat.chat_prompt_text(self.tokenizer, messages, self.args.reasoning)
        return bench_chat.prompt_ids(self.tokenizer, text, self.vocab_size, where)

    def decode_turn(self, name: str, turn: int, prompts: list[list[int]]) -> tuple[dict, list[dict]]:
        """spec over one turn's prompts: its figures and its per-prompt records."""
        stem = f"{name}.turn{turn}"
        prompts_file = self.work_dir / f"{stem}.prompts.jsonl"
        output_file = self.work_dir / f"{stem}.output.jsonl"
        bench_spec.write_prompts(prompts_file, prompts)
        label = f"{name} turn {turn}" if DATASETS[name].multi_turn else name
        print(f"{label}: {len(prompts)} prompts -> dflash-train spec", flush=True)
        figures = bench_spec.run_spec(self.binary, Path(self.args.config), Path(self.args.drafter), prompts_file,
                                      self.args.max_new_tokens, output_file, label)
        return figures, bench_spec.read_records(output_file, len(prompts), label)

    def run_dataset(self, name: str, all_turns: list[list[str]], source: str) -> tuple[dict, list[dict]]:
        """The dataset's figures pooled over its turns, and each turn's own. Turn k's conversation
        holds the target's own answers to turns 1..k-1 (decoded from its output ids), as z-lab's
        benchmark builds it."""
        rows = bench_datasets.select_rows(len(all_turns), self.args.limit)
        chosen = [all_turns[i] for i in rows]
        conversations = [[] for _ in chosen]
        runs, stopped = [], 0
        for turn in range(1, max(len(t) for t in chosen) + 1):
            active = [k for k, turns in enumerate(chosen) if len(turns) >= turn]
            prompts = []
            for k in active:
                conversations[k].append({"role": "user", "content": chosen[k][turn - 1]})
                prompts.append(self.prompt_ids(conversations[k], f"{source} row {rows[k] + 1}, turn {turn}"))
            figures, records = self.decode_turn(name, turn, prompts)
            runs.append(figures)
            for k, record in zip(active, records):
                completion = bench_spec.completion_ids(record, self.stop_ids)
                stopped += len(completion) < len(record["output_ids"])
                answer = bench_chat.answer_text(self.tokenizer, completion)
                conversations[k].append({"role": "assistant", "content": answer})
        result = bench_figures.pool_figures(runs)
        result.update({"source": source, "rows": len(all_turns), "rows_chosen": len(chosen),
                       "turns": len(runs), "outputs_ended_by_stop": stopped})
        if len(runs) > 1:
            result["per_turn"] = runs
        return result, runs


def run(args) -> int:
    try:
        names = check_arguments(args)
        target_dir, eval_section = read_config(Path(args.config))
        if args.work_dir is not None:
            args.work_dir.mkdir(parents=True, exist_ok=True)
            return bench_with_work_dir(args, names, target_dir, eval_section, args.work_dir)
        with tempfile.TemporaryDirectory(prefix="dflash-bench-") as tmp:
            return bench_with_work_dir(args, names, target_dir, eval_section, Path(tmp))
    except BenchInputError as e:
        print(f"dflash-data bench: error: {e}", file=sys.stderr)
        return 2
    except SpecFailed as e:
        print(f"dflash-data bench: error: {e}", file=sys.stderr)
        return 1


def bench_with_work_dir(args, names: list[str], target_dir: Path, eval_section: dict, work_dir: Path) -> int:
    bench = Benchmark(args, target_dir, eval_section, work_dir)
    # Every dataset is read and checked before the first (long) decode.
    loaded = {name: bench_datasets.load_turns(name, args.data_dir) for name in names}
    print(f"bench: drafter {args.drafter}, target {target_dir}, max_new_tokens {args.max_new_tokens}, "
          f"reasoning {args.reasoning + ' (enable_thinking=' + str(args.reasoning == 'on') + ')' if args.reasoning else 'not passed'}",
          flush=True)
    results, every_run = {}, []
    for name in names:
        turns, source = loaded[name]
        results[name], runs = bench.run_dataset(name, turns, source)
        every_run += runs
    overall = bench_figures.pool_figures(every_run)
    print()
    for name in names:
        print("\n".join(bench_figures.figure_lines(name, results[name])))
    print("\n".join(bench_figures.figure_lines("overall", overall)))
    print()
    print("\n".join(bench_figures.summary_table([*results.items(), ("overall", overall)])))
    if args.report is not None:
        report = {
            "settings": {
                "config": str(args.config), "drafter": str(args.drafter), "target": str(target_dir),
                "datasets": names, "max_new_tokens": args.max_new_tokens, "reasoning": args.reasoning,
                "limit": args.limit, "data_dir": str(args.data_dir) if args.data_dir else None,
                "dflash_train": str(bench.binary),
                "counts": {n: {"rows": r["rows"], "rows_chosen": r["rows_chosen"], "prompts": r["prompts"],
                               "turns": r["turns"]} for n, r in results.items()},
            },
            "datasets": results,
            "overall": overall,
        }
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"report: {args.report}")
    return 0
