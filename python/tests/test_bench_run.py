"""Tests of `dflash-data bench` end to end: a ChatML tokenizer trained here, prompts through its chat
template (enable_thinking only with --reasoning), the target's own first answer in mt-bench's second
turn, the errors for a target without a tokenizer or template and for a failing spec (through a
stand-in dflash-train), and a real run of build/dflash-train on a tiny Qwen3 target and a drafter
from a few training steps (skipped until the binary is built)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dflash_data import bench_chat, cli
from dflash_data.bench_datasets import BenchInputError
from dflash_data.bench_spec import REPO_ROOT, find_dflash_train

FIXTURES = Path(__file__).parent / "bench_fixtures"
DFLASH_TRAIN = REPO_ROOT / "build" / "dflash-train"
IM_END = 2  # <|im_end|>: the third special token, the target's eos
# ChatML; a true enable_thinking opens a think block, a false one writes an empty one (as Qwen3's
# template does), so the rendered text shows whether the switch was passed at all.
CHAT_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined %}{%- if enable_thinking %}{{ '<think>\\n' }}"
    "{%- else %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}{%- endif %}")


def user_turn(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n"


def assistant_turn(text):
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


GENERATION_PROMPT = "<|im_start|>assistant\n"
STEP_BY_STEP = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def write_tokenizer(target_dir: Path, chat_template=CHAT_TEMPLATE) -> Tokenizer:
    """A byte-level BPE of 400 ids (ChatML special tokens 0-2) trained on the fixtures, saved with
    its chat template beside the target's config.json."""
    corpus = [p.read_text() for p in sorted(FIXTURES.iterdir())] * 3
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    assert tokenizer.token_to_id("<|im_end|>") == IM_END
    target_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(target_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (target_dir / "tokenizer_config.json").write_text(json.dumps(config))
    return tokenizer


def write_bench_config(path: Path, target_dir: Path, dump: Path) -> Path:
    path.write_text(f'[job]\ndump_folder = "{dump}"\n[target]\npath = "{target_dir}"\n'
                    '[drafter]\nnum_hidden_layers = 1\nblock_size = 8\nmask_token_id = 511\n'
                    f'[data]\ntrain = "{dump}/unused.jsonl"\n[[buckets]]\nseq = 64\nanchors = 4\nbatch = 2\n')
    return path


def fixture_rows(name):
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else [json.loads(line) for line in text.splitlines()]


def prompt_lines(path: Path):
    return [json.loads(line)["input_ids"] for line in path.read_text().splitlines()]


@pytest.fixture
def small_target(tmp_path):
    """A target directory with config.json (eos <|im_end|>, vocabulary 512) and the tokenizer."""
    target = tmp_path / "target"
    raw = write_tokenizer(target)
    (target / "config.json").write_text(json.dumps({"model_type": "qwen3", "vocab_size": 512, "eos_token_id": IM_END}))
    return target, raw


def test_chat_template_gets_enable_thinking_only_with_reasoning(small_target):
    target, raw = small_target
    tokenizer = bench_chat.load_target_tokenizer(target)
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    assert bench_chat.chat_prompt_text(tokenizer, messages, None) == user_turn("What is 2 + 2?") + GENERATION_PROMPT
    assert bench_chat.chat_prompt_text(tokenizer, messages, "on") == \
        user_turn("What is 2 + 2?") + GENERATION_PROMPT + "<think>\n"
    assert bench_chat.chat_prompt_text(tokenizer, messages, "off") == \
        user_turn("What is 2 + 2?") + GENERATION_PROMPT + "<think>\n\n</think>\n\n"
    text = user_turn("What is 2 + 2?") + GENERATION_PROMPT
    assert bench_chat.prompt_ids(tokenizer, text, 512, "here") == raw.encode(text).ids


def test_target_without_tokenizer_or_template_says_how_to_fix(tmp_path):
    target = tmp_path / "bare"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": "qwen3", "vocab_size": 512}))
    with pytest.raises(BenchInputError) as e:
        bench_chat.load_target_tokenizer(target)
    assert "no usable tokenizer" in str(e.value) and "tokenizer.json" in str(e.value) and "hf download" in str(e.value)
    write_tokenizer(target, chat_template=None)
    with pytest.raises(BenchInputError, match="has no chat template; add 'chat_template'"):
        bench_chat.load_target_tokenizer(target)


def test_reasoning_needs_a_template_with_the_switch(small_target, tmp_path, capsys):
    target, _ = small_target
    write_tokenizer(target, chat_template="{{ messages[0]['content'] }}")
    config = write_bench_config(tmp_path / "bench.toml", target, tmp_path / "dump")
    (tmp_path / "drafter").mkdir()
    rc = cli.main(["bench", "--config", str(config), "--drafter", str(tmp_path / "drafter"), "--reasoning",
                   "--data-dir", str(FIXTURES), "--dflash-train", sys.executable])
    assert rc == 2
    assert "no enable_thinking switch" in capsys.readouterr().err


def test_dflash_train_that_is_not_an_executable_is_refused(tmp_path):
    (tmp_path / "dflash-train").write_text("not a program")
    with pytest.raises(BenchInputError, match="not an executable file; build it"):
        find_dflash_train(str(tmp_path / "dflash-train"))
    assert find_dflash_train(sys.executable) == Path(sys.executable)


def stand_in_spec(path: Path, answer_ids: list[int], fail_message: str | None = None) -> Path:
    """A dflash-train stand-in: every completion is answer_ids then <|im_end|>; figures of tau 2."""
    path.write_text(f"""#!{sys.executable}
import json, sys
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
if {fail_message!r}:
    sys.stderr.write("loading...\\n" + {fail_message!r} + "\\n")
    sys.exit(1)
prompts = [json.loads(l) for l in open(args["--prompts"]) if l.strip()]
with open(args["--output"], "w") as out:
    for p in prompts:
        out.write(json.dumps({{"output_ids": {answer_ids!r} + [{IM_END}], "finish": "stop",
                              "produced_per_round": [2, 2]}}) + "\\n")
n = len(prompts)
print("prompt lines...")
print(json.dumps({{"tau": 2.0, "tau_micro": 2.0, "accept_length": 2.0, "histogram": [0, 2 * n, 0, 0],
                  "block_size": 4, "prompts": n, "rounds": 2 * n, "new_tokens": 4 * n, "prompt_tau": [2.0] * n,
                  "tokens_per_s": 100.0, "tokens_per_s_target": 50.0, "speedup": 2.0, "lossless": True,
                  "tolerated_differences": 0}}))
""")
    path.chmod(0o755)
    return path


def test_mt_bench_second_turn_holds_the_targets_first_answer(small_target, tmp_path):
    target, raw = small_target
    answer = "Aloha! Hawaii is lovely."
    binary = stand_in_spec(tmp_path / "fake-dflash-train", raw.encode(answer).ids)
    config = write_bench_config(tmp_path / "bench.toml", target, tmp_path / "dump")
    (tmp_path / "drafter").mkdir()
    work, report = tmp_path / "work", tmp_path / "report.json"
    rc = cli.main(["bench", "--config", str(config), "--drafter", str(tmp_path / "drafter"), "--datasets", "mt-bench",
                   "--data-dir", str(FIXTURES), "--dflash-train", str(binary), "--work-dir", str(work),
                   "--report", str(report)])
    assert rc == 0
    rows = fixture_rows("mt-bench.jsonl")
    turn2 = prompt_lines(work / "mt-bench.turn2.prompts.jsonl")
    for row, ids in zip(rows, turn2, strict=True):
        first, second = row["prompt"]
        expected = user_turn(first) + assistant_turn(answer) + user_turn(second) + GENERATION_PROMPT
        assert ids == raw.encode(expected).ids
    mt = json.loads(report.read_text())["datasets"]["mt-bench"]
    assert (mt["turns"], mt["prompts"], len(mt["per_turn"]), mt["outputs_ended_by_stop"]) == (2, 4, 2, 4)


def test_failing_spec_shows_its_stderr_tail(small_target, tmp_path, capsys):
    target, _ = small_target
    message = ("dflash-train: error: drafter /d does not fit the target /t: its hidden_size is 32 but the "
               "target's is 64; fix: use a drafter trained for this target (or the matching target.path)")
    binary = stand_in_spec(tmp_path / "fake-dflash-train", [], fail_message=message)
    config = write_bench_config(tmp_path / "bench.toml", target, tmp_path / "dump")
    (tmp_path / "drafter").mkdir()
    rc = cli.main(["bench", "--config", str(config), "--drafter", str(tmp_path / "drafter"), "--datasets", "gsm8k",
                   "--data-dir", str(FIXTURES), "--dflash-train", str(binary)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "gsm8k: dflash-train spec failed (exit status 1); its stderr ends with:\nloading...\n" + message in err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Qwen3 target (vocabulary 512, the tokenizer beside it, eos <|im_end|>) and a drafter
    checkpoint after two training steps; a second drafter trained for a target of another width."""
    if not DFLASH_TRAIN.is_file():
        pytest.skip(f"{DFLASH_TRAIN} is not built (cmake --build build)")
    root = tmp_path_factory.mktemp("bench-run")

    def train(name, *extra):
        subprocess.run([str(DFLASH_TRAIN), "--config", str(REPO_ROOT / "configs" / "tiny.toml"),
                        f"--job.dump_folder={root / name}", f"--target.path={root / name / 'target'}",
                        "--target.synthetic.vocab_size=512", "--drafter.mask_token_id=511",
                        f"--data.train={root / name / 'train.jsonl'}", "--data.eval=",
                        "--data.synthetic.train_sequences=16", "--data.synthetic.eval_sequences=0",
                        "--training.steps=2", "--checkpoint.every=2", "--eval.spec_prompts=",
                        "--runtime.cpu_workers=1", "--buckets=[{seq=64,anchors=4,batch=2}]", *extra],
                       cwd=root, check=True, capture_output=True, text=True)
        return root / name / "checkpoints" / "step-2"

    drafter = train("main")
    other_drafter = train("narrow", "--target.synthetic.hidden_size=32")
    target = root / "main" / "target"
    raw = write_tokenizer(target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "eos_token_id": IM_END}))
    return {"target": target, "raw": raw, "drafter": drafter, "other_drafter": other_drafter,
            "config": write_bench_config(root / "bench.toml", target, root / "bench-dump"), "root": root}


def expected_first_turns(name):
    """Each fixture row's first user turn, written out as z-lab's benchmark formats it."""
    if name == "gsm8k":
        return [r["question"] + STEP_BY_STEP for r in fixture_rows("gsm8k.jsonl")]
    if name == "math500":
        return [r["problem"] + STEP_BY_STEP for r in fixture_rows("math500.jsonl")]
    if name == "humaneval":
        return ["Write a solution to the following problem and make sure that it passes the tests:\n```python\n"
                + r["prompt"] + "\n```" for r in fixture_rows("humaneval.jsonl")]
    if name == "mbpp":
        return [r["prompt"] for r in fixture_rows("mbpp.json")]
    return [r["prompt"][0] for r in fixture_rows("mt-bench.jsonl")]


def test_bench_runs_spec_on_all_five_datasets(trained, capsys):
    work, report = trained["root"] / "work", trained["root"] / "report.json"
    rc = cli.main(["bench", "--config", str(trained["config"]), "--drafter", str(trained["drafter"]),
                   "--data-dir", str(FIXTURES), "--max-new-tokens", "8", "--work-dir", str(work),
                   "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 0, out
    raw = trained["raw"]
    names = ["gsm8k", "math500", "humaneval", "mbpp", "mt-bench"]
    for name in names:
        got = prompt_lines(work / f"{name}.turn1.prompts.jsonl")
        assert got == [raw.encode(user_turn(t) + GENERATION_PROMPT).ids for t in expected_first_turns(name)], name
    # mt-bench's second turn: the target's own first answer (final <|im_end|> dropped), decoded.
    records = [json.loads(line) for line in (work / "mt-bench.turn1.output.jsonl").read_text().splitlines()]
    for row, record, ids in zip(fixture_rows("mt-bench.jsonl"), records,
                                prompt_lines(work / "mt-bench.turn2.prompts.jsonl"), strict=True):
        completion = record["output_ids"][:-1] if record["finish"] == "stop" else record["output_ids"]
        answer = raw.decode(completion, skip_special_tokens=True)
        first, second = row["prompt"]
        assert ids == raw.encode(user_turn(first) + assistant_turn(answer) + user_turn(second) + GENERATION_PROMPT).ids
    data = json.loads(report.read_text())
    assert list(data["datasets"]) == names
    for name, f in [*data["datasets"].items(), ("overall", data["overall"])]:
        for key in ("tau", "accept_length", "histogram", "tokens_per_s", "tokens_per_s_target", "speedup"):
            assert key in f, (name, key)
        assert 1.0 <= f["tau"] <= f["block_size"] == 8, name
        assert f["lossless"] is True
    assert data["datasets"]["mt-bench"]["turns"] == 2 and data["datasets"]["mt-bench"]["prompts"] == 4
    assert data["overall"]["prompts"] == 3 + 3 + 3 + 3 + 4
    settings = data["settings"]
    assert (settings["max_new_tokens"], settings["reasoning"], settings["counts"]["mt-bench"]["rows"]) == (8, None, 2)
    assert "overall" in out and "speedup" in out


def test_bench_with_reasoning_and_limit(trained):
    work = trained["root"] / "work-reasoning"
    rc = cli.main(["bench", "--config", str(trained["config"]), "--drafter", str(trained["drafter"]),
                   "--datasets", "gsm8k", "--limit", "2", "--reasoning", "--data-dir", str(FIXTURES),
                   "--max-new-tokens", "4", "--work-dir", str(work)])
    assert rc == 0
    questions = expected_first_turns("gsm8k")
    chosen = [questions[1], questions[0]]  # z-lab's choice of 2 of 3 rows: Random(42) shuffles to [1, 0, 2]
    expected = [trained["raw"].encode(user_turn(q) + GENERATION_PROMPT + "<think>\n").ids for q in chosen]
    assert prompt_lines(work / "gsm8k.turn1.prompts.jsonl") == expected


def test_drafter_of_another_target_is_refused_with_specs_message(trained, capsys):
    rc = cli.main(["bench", "--config", str(trained["config"]), "--drafter", str(trained["other_drafter"]),
                   "--datasets", "mbpp", "--data-dir", str(FIXTURES), "--max-new-tokens", "4"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "mbpp: dflash-train spec failed (exit status 1)" in err
    assert "does not fit the target" in err and "hidden_size is 32" in err
