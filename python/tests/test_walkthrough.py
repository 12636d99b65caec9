"""The walk-through's tiny variant (docs/USER_GUIDE.md, section 2), run as the guide prints it: the commands of
its marked block, line by line, in a fresh folder that sees the repository's configs/, python/, build/ and .venv/
through links, without network. After each command the test checks what it made: the target with its tokenizer,
prompts as transformers' chat template renders them, the target's answers, loss masks whose ones are exactly those
answers, a training run whose loss falls, a bench report of all five
datasets, an export that loads back into `dflash-train spec`. Then `dflash-train spec --output` on z-lab's golden
case (tests/golden/dflash-zlab) must give the reference package's outputs and per-round counts exactly.
Skipped until build/dflash-train is built."""

import json
import shlex
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "USER_GUIDE.md"
DFLASH_TRAIN = ROOT / "build" / "dflash-train"
DFLASH_DATA = ROOT / ".venv" / "bin" / "dflash-data"
MARKER = "<!-- python/tests/test_walkthrough.py runs the next block"
CHAT_CONFIG = ROOT / "configs" / "walkthrough" / "tiny-chat.toml"
SHAREGPT = ROOT / "configs" / "walkthrough" / "sharegpt"
BENCH_DATASETS = ["gsm8k", "math500", "humaneval", "mbpp", "mt-bench"]

pytestmark = [
    pytest.mark.skipif(not DFLASH_TRAIN.is_file(), reason=f"{DFLASH_TRAIN} is not built (cmake --build build)"),
    pytest.mark.skipif(not DFLASH_DATA.is_file(), reason=f"{DFLASH_DATA} is missing (bash scripts/setup-python.sh)"),
]


def guide_commands():
    """The lines of the block after MARKER in the guide, continuation lines joined, each split into words."""
    text = GUIDE.read_text(encoding="utf-8")
    at = text.find(MARKER)
    assert at >= 0, f"{GUIDE}: no line starting {MARKER!r} before the tiny walk-through's commands"
    block = text[text.index("```", at):]
    body = block[block.index("\n") + 1:block.index("\n```", 3)]
    return [shlex.split(line) for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def run(words, cwd):
    started = time.perf_counter()
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{shlex.join(words)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr, time.perf_counter() - started


def option(words, name):
    return words[words.index(name) + 1]


def jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def check_target(work, config):
    target = work / config["target"]["path"]
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    model = json.loads((target / "config.json").read_text())
    assert model["vocab_size"] == 512 and "eos_token_id" not in model


def check_prompts(work, config, words):
    """Every prompt is its conversation up to the final assistant turn as transformers renders it with the generation
    prompt, tokenized without special tokens; ids are the rows' own."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(work / config["target"]["path"]))
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    rows, prompts = jsonl(SHAREGPT / f"{option(words, '--split')}.jsonl"), jsonl(work / option(words, "--output"))
    assert len(prompts) == len(rows) > 0
    for row, prompt in zip(rows, prompts):
        messages = [{"role": roles[t["from"]], "content": t["value"]} for t in row["conversations"]]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        text = tokenizer.apply_chat_template(messages[:last], tokenize=False, add_generation_prompt=True)
        assert prompt == {"id": row["id"], "prompt_ids": tokenizer(text, add_special_tokens=False)["input_ids"]}


def check_generated(work, words):
    """The header, then one record per prompt in the prompts' order, each running to --max-new-tokens (no stop id)."""
    lines = jsonl(work / option(words, "--output"))
    prompts, new = jsonl(work / option(words, "--prompts")), int(option(words, "--max-new-tokens"))
    assert lines[0]["format"] == "dflash-train generate" and lines[0]["max_new_tokens"] == new
    assert [(r["id"], r["prompt_ids"]) for r in lines[1:]] == [(p["id"], p["prompt_ids"]) for p in prompts]
    assert all(len(r["output_ids"]) == new and r["finish"] == "length" for r in lines[1:])
    assert all(0 <= t < 512 for r in lines[1:] for t in r["output_ids"])


def check_training_data(work, config, words):
    """Each sequence is a record's prompt and answer, the loss mask 1 exactly on the answer."""
    out = work / (option(words, "--output") if "--output" in words else config["data"]["train"])
    records = jsonl(work / option(words, "--generated"))[1:]
    assert jsonl(out) == [{"input_ids": r["prompt_ids"] + r["output_ids"],
                           "loss_mask": [0] * len(r["prompt_ids"]) + [1] * len(r["output_ids"])} for r in records]


def check_training(work, config):
    dump = work / config["job"]["dump_folder"]
    steps = config["training"]["steps"]
    records = jsonl(dump / "metrics.jsonl")
    train = [r for r in records if "eval" not in r]
    every = config["metrics"]["log_every"]
    assert [r["step"] for r in train] == [1, *range(every, steps + 1, every)]
    assert train[-1]["loss"] < train[0]["loss"] - 0.3
    evals = [r for r in records if "eval" in r and "loss" in r]
    assert len(evals) >= 2 and evals[-1]["loss"] < evals[0]["loss"]
    assert (dump / "checkpoints" / f"step-{steps}").is_dir()


def check_bench(work, words):
    report = json.loads((work / option(words, "--report")).read_text())
    assert list(report["datasets"]) == BENCH_DATASETS
    limit = int(option(words, "--limit"))
    for name, figures in report["datasets"].items():
        assert figures["prompts"] == (2 * limit if name == "mt-bench" else limit), name
        assert figures["lossless"] is True and 1.0 <= figures["tau"] <= figures["block_size"], name
    assert report["overall"]["prompts"] == 6 * limit


def check_export(work, words, config):
    export = work / option(words, "--out")
    assert sorted(p.name for p in export.iterdir()) == ["config.json", "model.safetensors", "modeling_dflash.py"]
    drafter = json.loads((export / "config.json").read_text())
    assert drafter["auto_map"]["AutoModel"] == "modeling_dflash.DFlashDraftModel"
    assert drafter["dflash_config"]["mask_token_id"] == config["drafter"]["mask_token_id"]
    assert drafter["vocab_size"] == 512 and drafter["block_size"] == config["drafter"]["block_size"]
    assert "class DFlashDraftModel" in (export / "modeling_dflash.py").read_text()


def check_spec(work, words, output, config):
    records = jsonl(work / option(words, "--output"))
    assert len(records) == len(jsonl(work / config["data"]["eval"]))
    new = int(option(words, "--max-new-tokens"))
    for r in records:  # no stop id (the tiny target names no eos_token_id): every prompt runs to the budget
        assert r["finish"] == "length" and len(r["output_ids"]) == new == sum(r["produced_per_round"]) + 1
        assert r["prompt_ids"][-1] == 10  # the prompt ends after the assistant header (and its empty think block)
    assert "lossless: every output equals the target's own greedy decoding" in output


def test_tiny_walkthrough_as_the_guide_prints_it(tmp_path):
    commands = guide_commands()
    programs = [(c[0], c[1]) for c in commands]
    assert programs == [("./build/dflash-train", "prepare"), (".venv/bin/dflash-data", "prepare"),
                        (".venv/bin/dflash-data", "prepare"), ("./build/dflash-train", "generate"),
                        ("./build/dflash-train", "generate"), (".venv/bin/dflash-data", "prepare"),
                        (".venv/bin/dflash-data", "prepare"), ("./build/dflash-train", "--config"),
                        (".venv/bin/dflash-data", "bench"), ("./build/dflash-train", "export"),
                        ("./build/dflash-train", "spec")], commands
    for name in ("configs", "python", "build", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    config = tomllib.loads(CHAT_CONFIG.read_text())
    timings = []
    for i, words in enumerate(commands):
        output, seconds = run(words, tmp_path)
        timings.append((shlex.join(words[:2]), round(seconds, 1)))
        if i == 0:
            target_config = tomllib.loads((tmp_path / option(words, "--config")).read_text())
            assert target_config["target"]["path"] == config["target"]["path"]
            check_target(tmp_path, config)
        elif words[1] == "prepare" and "--generate-prompts" in words:
            check_prompts(tmp_path, config, words)
        elif words[1] == "prepare":
            check_training_data(tmp_path, config, words)
        elif words[1] == "generate":
            check_generated(tmp_path, words)
        elif words[1] == "--config":
            check_training(tmp_path, config)
        elif words[1] == "bench":
            check_bench(tmp_path, words)
        elif words[1] == "export":
            check_export(tmp_path, words, config)
        else:
            check_spec(tmp_path, words, output, config)
    print("walk-through timings (s):", timings)
    # Nothing was written outside the folder's runs/.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".venv", "build", "configs", "python", "runs"])


@pytest.mark.parametrize("case", ["trained_case.json", "trained_stop_case.json"])
def test_spec_output_equals_the_reference_packages_on_the_golden_export(tmp_path, case):
    """`dflash-train spec --output` on an exported drafter reproduces z-lab's dflash 0.1.0 (tests/golden/dflash-zlab):
    every output and every round's count."""
    golden = json.loads((ROOT / "tests" / "golden" / "dflash-zlab" / case).read_text())
    drafter = json.loads((ROOT / golden["drafter"] / "config.json").read_text())
    config = tmp_path / "golden.toml"
    config.write_text(
        f'[target]\npath = "{ROOT / golden["target"]}"\n'
        f'[drafter]\nblock_size = {golden["block_size"]}\nmask_token_id = {drafter["dflash_config"]["mask_token_id"]}\n'
        f'[data]\ntrain = "{tmp_path / "unused.jsonl"}"\n'
        f'[eval]\nspec_stop_token_ids = {json.dumps(golden["stop_token_ids"])}\nspec_ignore_eos = '
        f'{"false" if golden["stop_token_ids"] else "true"}\n'
        '[[buckets]]\nseq = 64\nanchors = 4\nbatch = 1\n')
    out = tmp_path / "records.jsonl"
    run([str(DFLASH_TRAIN), "spec", "--config", str(config), "--drafter", str(ROOT / golden["drafter"]),
         "--prompts", str(ROOT / golden["prompts"]), "--max-new-tokens", str(golden["max_new_tokens"]),
         "--output", str(out)], tmp_path)
    records = jsonl(out)
    assert len(records) == len(golden["cases"]) == 16
    for i, (want, got) in enumerate(zip(golden["cases"], records)):
        assert got["prompt_ids"] == want["prompt"], i
        assert got["prompt_ids"] + got["output_ids"] == want["output_ids"], i
        assert got["produced_per_round"] == want["produced_per_round"], i
    with_rounds = [r for r in records if r["produced_per_round"]]
    tau = sum(sum(r["produced_per_round"]) / len(r["produced_per_round"]) for r in with_rounds) / len(with_rounds)
    assert tau == pytest.approx(golden["tau"], rel=1e-12)
