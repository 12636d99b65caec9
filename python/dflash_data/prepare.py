"""`dflash-data prepare`: chat conversations (ShareGPT, OpenAI messages, or a vLLM/SGLang batch run's requests and
outputs) to the trainer's training data, JSONL and/or token shards, with loss masks on the assistant turns.

Each conversation is rendered once with the target's whole chat template and tokenized once; a token is trained on
iff its first character lies in an assistant turn, from after the assistant header through the end-of-turn token
(docs/USER_GUIDE.md, section 3)."""

import argparse
import json
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path

from .chat_inputs import open_input
from .chat_messages import MessageOptions, parse_role_map
from .chat_render import detect_chat_format, unescape_marker
from .prepare_errors import PrepareError
from .prepare_output import DEFAULT_SEQUENCES_PER_SHARD, JsonlWriter, TokenShardWriter
from .prepare_pipeline import PrepareSettings, load_tokenizer, process_all


def register(sub):
    p = sub.add_parser(
        "prepare", help="chat conversations to training data (JSONL or token shards) with loss masks",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("input")
    src.add_argument("--input", required=True, metavar="FILE_OR_NAME",
                     help=".jsonl/.json(.gz)/.parquet/.arrow/.csv file, dataset directory, or hub dataset name")
    src.add_argument("--split", default="train", help="split of a hub dataset or dataset directory (default: train)")
    src.add_argument("--column", help="the column holding the messages (default: conversations, else messages)")
    src.add_argument("--batch-output", metavar="FILE",
                     help="output file of an OpenAI-format batch run (vLLM run_batch, SGLang batches); --input is "
                          "then its requests file, joined by custom_id")
    src.add_argument("--role-map", action="append", metavar="NAME=ROLE",
                     help="treat role NAME as user, assistant, system or tool (repeatable, or comma-separated)")
    model = p.add_argument_group("target and tokenizer")
    model.add_argument("--config", type=Path, metavar="FILE",
                       help="training config (TOML): target.path, drafter.mask_token_id and data.train stand in for "
                            "--target, --mask-token-id and the output")
    model.add_argument("--target", type=Path, metavar="DIR",
                       help="the target's HF directory (config.json for vocab_size; the tokenizer unless --tokenizer)")
    model.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (or hub name), if not the target's")
    model.add_argument("--mask-token-id", type=int, metavar="ID",
                       help="drafter.mask_token_id: refused if the tokenizer emits it")
    chat = p.add_argument_group("chat template")
    chat.add_argument("--chat-template", type=Path, metavar="FILE",
                      help="a Jinja file replacing the tokenizer's template")
    chat.add_argument("--enable-thinking", action=argparse.BooleanOptionalAction, default=None,
                      help="pass enable_thinking to the template (only when given)")
    chat.add_argument("--system-prompt", metavar="TEXT", help="system prompt for conversations that have none")
    chat.add_argument("--replace-system-prompt", action="store_true",
                      help="use --system-prompt in every conversation, replacing their own")
    chat.add_argument("--assistant-header", metavar="TEXT",
                      help="text that opens an assistant turn (\\n for newline), for templates not recognised")
    chat.add_argument("--end-of-turn", action="append", metavar="TEXT",
                      help="text that closes an assistant turn (repeatable), with --assistant-header")
    out = p.add_argument_group("output")
    out.add_argument("--output", type=Path, metavar="OUT.jsonl", help="JSONL output")
    out.add_argument("--shards", type=Path, metavar="DIR", help="token-shard directory output (needs the target)")
    out.add_argument("--sequences-per-shard", type=int, default=DEFAULT_SEQUENCES_PER_SHARD, metavar="N",
                     help=f"sequences per shard file (default: {DEFAULT_SEQUENCES_PER_SHARD}, as dflash-train prepare)")
    out.add_argument("--max-length", type=int, metavar="N", help="longest sequence in tokens")
    out.add_argument("--long", choices=("cut", "drop"), default="cut",
                     help="a longer sequence is cut to N tokens or dropped (default: cut)")
    run = p.add_argument_group("run")
    run.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default: 1)")
    run.add_argument("--chunk-size", type=int, default=256, metavar="N",
                     help="conversations per unit of work (default: 256)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_prepare)


def _read_config(path):
    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except FileNotFoundError:
        raise PrepareError(f"--config {path}: no such file; fix: check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise PrepareError(f"{path}: not valid TOML ({exc}); fix: correct the file") from None
    section = lambda name: cfg.get(name) if isinstance(cfg.get(name), dict) else {}
    return section("target").get("path"), section("drafter").get("mask_token_id"), section("data").get("train")


def _target_vocab_size(target):
    config = Path(target) / "config.json"
    if not config.is_file():
        raise PrepareError(
            f"target {target}: no config.json; fix: --target (or target.path) must be the target's Hugging Face "
            f"directory; pass a tokenizer-only directory with --tokenizer instead"
        )
    try:
        vocab = json.loads(config.read_text()).get("vocab_size")
    except ValueError as exc:
        raise PrepareError(f"{config}: not valid JSON ({exc}); fix: restore the model's config.json") from None
    if not isinstance(vocab, int) or vocab <= 0:
        raise PrepareError(f"{config}: vocab_size is {vocab!r}, expected a positive integer; fix: restore config.json")
    return vocab


def _resolve(args):
    """Fills target, mask token and outputs from --config where not given; checks what goes together."""
    if args.config is not None:
        target, mask_token_id, train = _read_config(args.config)
        if args.target is None and target:
            args.target = Path(target)
        if args.mask_token_id is None and mask_token_id is not None:
            if not isinstance(mask_token_id, int) or isinstance(mask_token_id, bool):
                raise PrepareError(f"{args.config}: drafter.mask_token_id is {mask_token_id!r}, expected an integer")
            args.mask_token_id = mask_token_id
        if args.output is None and args.shards is None and train:
            if str(train).endswith((".jsonl", ".json")):
                args.output = Path(train)
            else:
                args.shards = Path(train)
    if args.target is None and args.tokenizer is None:
        raise PrepareError(
            "no tokenizer: give --target DIR (the target model), --tokenizer DIR, or --config with target.path"
        )
    if args.output is None and args.shards is None:
        raise PrepareError("no output: give --output OUT.jsonl and/or --shards DIR (or --config with data.train)")
    if args.shards is not None and args.target is None:
        raise PrepareError("--shards records the target's vocab_size: give --target DIR (or --config with target.path)")
    if args.replace_system_prompt and args.system_prompt is None:
        raise PrepareError("--replace-system-prompt needs --system-prompt TEXT (the prompt to put in its place)")
    if args.max_length is not None and args.max_length < 1:
        raise PrepareError(f"--max-length {args.max_length}: must be at least 1")
    if args.workers < 1 or args.chunk_size < 1 or args.sequences_per_shard < 1:
        raise PrepareError("--workers, --chunk-size and --sequences-per-shard must be at least 1")
    if args.output is not None and Path(args.input).exists() and args.output.resolve() == Path(args.input).resolve():
        raise PrepareError(f"--output {args.output} is the input file; fix: write to another path")


def _check_vocabulary(tokenizer, tokenizer_name, vocab_size, config_path, mask_token_id):
    """Refuses a tokenizer whose ids exceed the target's vocab_size or that emits the mask token for ordinary text;
    returns the fix for a mask token that shows up in the data."""
    size = max(len(tokenizer), max(tokenizer.get_vocab().values(), default=-1) + 1)
    if vocab_size is not None and size > vocab_size:
        raise PrepareError(
            f"the tokenizer {tokenizer_name} has {size} ids but {config_path} says vocab_size {vocab_size}: its ids "
            f"would not fit the target; fix: use the target's own tokenizer (--tokenizer) or the matching --target"
        )
    if mask_token_id is None:
        return ""
    spare = f" such as {size} (ids {size}..{vocab_size - 1} are unused)" if vocab_size and size < vocab_size else ""
    fix = f"set drafter.mask_token_id (--mask-token-id) to an id the tokenizer never produces{spare}"
    if vocab_size is not None and not 0 <= mask_token_id < vocab_size:
        raise PrepareError(
            f"drafter.mask_token_id {mask_token_id} is outside [0, {vocab_size}) (the target's vocab_size); fix: {fix}"
        )
    if mask_token_id < size and mask_token_id not in tokenizer.added_tokens_decoder:
        raise PrepareError(
            f"drafter.mask_token_id {mask_token_id} is {tokenizer.convert_ids_to_tokens(mask_token_id)!r}, an ordinary "
            f"token of {tokenizer_name}: the tokenizer emits it for plain text, so the drafter could not tell the mask "
            f"from it; fix: {fix}"
        )
    return fix


def _template_kwargs(args):
    return {} if args.enable_thinking is None else {"enable_thinking": args.enable_thinking}


def _settings(args, tokenizer_name, template_override, vocab_size):
    tokenizer = load_tokenizer(tokenizer_name, template_override)
    try:
        template = tokenizer.get_chat_template(None, None)
    except ValueError:
        raise PrepareError(
            f"the tokenizer {tokenizer_name} has no chat template; fix: pass one with --chat-template FILE.jinja "
            f"(the template of the model it belongs to)"
        ) from None
    chat_format = detect_chat_format(
        template, args.assistant_header and unescape_marker(args.assistant_header),
        [unescape_marker(e) for e in args.end_of_turn or ()],
    )
    config_path = Path(args.target) / "config.json" if args.target else None
    fix = _check_vocabulary(tokenizer, tokenizer_name, vocab_size, config_path, args.mask_token_id)
    options = MessageOptions(
        column=None, role_map=parse_role_map(args.role_map), system_prompt=args.system_prompt,
        replace_system_prompt=args.replace_system_prompt,
    )
    settings = PrepareSettings(
        tokenizer_path=tokenizer_name, chat_template=template_override, template_kwargs=_template_kwargs(args),
        chat_format=chat_format, message_options=options, max_length=args.max_length, long_policy=args.long,
        mask_token_id=args.mask_token_id, mask_token_fix=fix, want_jsonl=args.output is not None,
        want_shards=args.shards is not None, overlap=args.workers == 1,
    )
    return settings, tokenizer


def _summary(source, totals, args, shard_files, seconds):
    lines = []
    outputs = [str(p) for p in (args.output,) if p is not None]
    if args.shards is not None:
        outputs.append(f"{args.shards} ({shard_files} shard file{'s' if shard_files != 1 else ''})")
    share = 100.0 * totals["loss_tokens"] / max(totals["tokens"], 1)
    lines.append(
        f"prepare: read {totals['read']} conversations from {source.name}; wrote {totals['written']} "
        f"({totals['tokens']} tokens, {totals['loss_tokens']} loss tokens = {share:.1f}%) to {' and '.join(outputs)}"
    )
    dropped = totals["dropped"]
    if dropped:
        parts = [f"{n} {reason} (first: {where}: {detail})" for reason, (n, where, detail) in dropped.items()]
        lines.append(f"prepare: dropped {sum(n for n, _, _ in dropped.values())}: " + "; ".join(parts))
    if totals["cut"]:
        lines.append(f"prepare: cut {totals['cut']} conversations to --max-length {args.max_length} tokens")
    rate = totals["read"] / seconds if seconds > 0 else 0.0
    lines.append(f"prepare: {seconds:.1f} s ({rate:.0f} conversations/s) with {args.workers} worker(s)")
    record = {k: totals[k] for k in ("read", "written", "tokens", "loss_tokens", "cut")}
    record["dropped"] = {reason: n for reason, (n, _, _) in dropped.items()}
    record["seconds"] = round(seconds, 3)
    return lines, record


def prepare(args):
    """Runs the whole preparation; returns the summary record. Raises PrepareError on bad input."""
    started = time.perf_counter()
    _resolve(args)
    vocab_size = _target_vocab_size(args.target) if args.target is not None else None
    tokenizer_name = args.tokenizer or str(args.target)
    template_override = None
    if args.chat_template is not None:
        try:
            template_override = args.chat_template.read_text(encoding="utf-8")
        except OSError as exc:
            raise PrepareError(f"--chat-template {args.chat_template}: {exc.strerror}; fix: check the path") from None
    settings, tokenizer = _settings(args, tokenizer_name, template_override, vocab_size)
    source = open_input(args.input, args.split, args.column, args.batch_output)
    settings = replace(settings, message_options=replace(settings.message_options, column=source.column))
    jsonl = JsonlWriter(args.output) if args.output is not None else None
    shards = TokenShardWriter(args.shards, vocab_size, args.sequences_per_shard) if args.shards is not None else None
    totals = {"read": 0, "written": 0, "tokens": 0, "loss_tokens": 0, "cut": 0, "dropped": {}}
    from tqdm import tqdm

    bar = tqdm(total=source.total, unit="conv", file=sys.stderr, disable=args.no_progress, desc="prepare")

    def on_result(result):
        for line, ids, mask in result.sequences:
            if jsonl is not None:
                jsonl.write(line)
            if shards is not None:
                shards.append(ids, mask)
        for key in ("read", "tokens", "loss_tokens", "cut"):
            totals[key] += getattr(result, key)
        totals["written"] += len(result.sequences)
        for reason, (n, where, detail) in result.drops.items():
            entry = totals["dropped"].setdefault(reason, [0, where, detail])
            entry[0] += n
        bar.update(result.read)

    try:
        process_all(source.rows(), settings, tokenizer, args.workers, args.chunk_size, on_result)
        bar.close()
        if totals["written"] == 0:
            reasons = "; ".join(f"{n} {r} (first: {w}: {d})" for r, (n, w, d) in totals["dropped"].items())
            raise PrepareError(
                f"{source.name}: no conversation was written ({totals['read']} read"
                f"{': ' + reasons if reasons else ''}); fix: check --column and the data"
            )
    except BaseException:
        bar.close()
        for writer in (jsonl, shards):
            if writer is not None:
                writer.abort()
        raise
    if jsonl is not None:
        jsonl.commit()
    shard_files = shards.finish() if shards is not None else 0
    lines, record = _summary(source, totals, args, shard_files, time.perf_counter() - started)
    for line in lines:
        print(line)
    print(json.dumps(record))
    return record


def run_prepare(args):
    try:
        prepare(args)
    except PrepareError as exc:
        print(f"dflash-data prepare: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dflash-data prepare: interrupted; no output was completed", file=sys.stderr)
        return 130
    return 0
