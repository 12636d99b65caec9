"""`dflash-data prepare` end to end: token shards in the documented binary format (read back here, opened by the C++
trainer, and byte-identical to what `dflash-train prepare` writes), --max-length, --workers, --config, and every
error about the tokenizer, the template and the mask token."""

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from prepare_fixtures import paragraph, sentence
from prepare_fixtures.testing import chat_dirs, read_jsonl, run_prepare, summary, tokenizers, write_jsonl  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "build" / "dflash-train"


def conversations(n, seed=0):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": sentence(rng)}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": paragraph(rng, 1, 2)})
            think = f"<think>\n{sentence(rng)}\n</think>\n\n" if rng.random() < 0.5 else ""
            messages.append({"role": "assistant", "content": think + paragraph(rng, 1, 3)})
        rows.append({"messages": messages})
    return rows


def read_token_shards(directory):
    """An independent reader of docs/data-formats.md "Token shards": [(ids, mask)] and the index."""
    directory = Path(directory)
    index = json.loads((directory / "index.json").read_text())
    assert index["format"] == "dflash-token-shards" and index["version"] == 1
    sequences = []
    for entry in index["shards"]:
        data = (directory / entry["file"]).read_bytes()
        assert data[:8] == b"DFLTOK\x00\x01"
        version, header_bytes, n, t, vocab, first = struct.unpack_from("<IIQQQQ", data, 8)
        assert (version, header_bytes, vocab) == (1, 64, index["vocab_size"])
        assert (n, t, first) == (entry["sequences"], entry["tokens"], entry["first_sequence"])
        assert data[48:64] == bytes(16) and len(data) == 64 + 8 * (n + 1) + 5 * t
        offsets = struct.unpack_from(f"<{n + 1}Q", data, 64)
        ids = struct.unpack_from(f"<{t}i", data, 64 + 8 * (n + 1))
        mask = data[64 + 8 * (n + 1) + 4 * t:]
        assert offsets[0] == 0 and offsets[-1] == t
        for k in range(n):
            sequences.append((list(ids[offsets[k]:offsets[k + 1]]), list(mask[offsets[k]:offsets[k + 1]])))
    assert index["sequences"] == len(sequences)
    return sequences, index


def test_shards_hold_the_jsonl_sequences_and_replace_an_earlier_run(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", conversations(20))
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "tokens-00099.bin").write_bytes(b"stale")
    (shards / "index.json").write_text("{}")
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl",
                                 "--shards", shards, "--sequences-per-shard", "7")
    assert code == 0, err
    sequences, index = read_token_shards(shards)
    rows = read_jsonl(tmp_path / "o.jsonl")
    assert sequences == [(r["input_ids"], r["loss_mask"]) for r in rows]
    assert [e["sequences"] for e in index["shards"]] == [7, 7, 6]
    assert index["vocab_size"] == json.loads((chat_dirs[0] / "config.json").read_text())["vocab_size"]
    assert sorted(p.name for p in shards.iterdir()) == ["index.json", "tokens-00000.bin", "tokens-00001.bin",
                                                        "tokens-00002.bin"]
    assert "3 shard files" in out


def _trainer_config(path, target, train, dump, mask_token_id):
    path.write_text(
        f'[job]\nname = "prepare-test"\ndump_folder = "{dump}"\n[target]\npath = "{target}"\n'
        f"[drafter]\nnum_hidden_layers = 1\nblock_size = 4\nmask_token_id = {mask_token_id}\n"
        f'[data]\ntrain = "{train}"\n[[buckets]]\nseq = 256\nanchors = 4\nbatch = 1\n[runtime]\ndevices = "cpu"\n'
    )
    return path


def _spare_id(target):
    return json.loads((Path(target) / "config.json").read_text())["vocab_size"] - 1


@pytest.mark.skipif(not TRAINER.is_file(), reason="build/dflash-train is not built (cmake --build build): the C++ "
                                                  "side's acceptance of the shards is not checked")
def test_cxx_trainer_opens_the_shards_and_writes_the_same_bytes(chat_dirs, tmp_path, capsys):
    target = chat_dirs[0]
    data = write_jsonl(tmp_path / "in.jsonl", conversations(30, seed=1))
    ours = tmp_path / "ours"
    code, _, err = run_prepare(capsys, "--target", target, "--input", data, "--output", tmp_path / "o.jsonl",
                               "--shards", ours, "--mask-token-id", _spare_id(target))
    assert code == 0, err
    split = tmp_path / "split"
    code, _, err = run_prepare(capsys, "--target", target, "--input", data, "--shards", split,
                               "--sequences-per-shard", "4")
    assert code == 0, err
    # The trainer reads each output (shards of 1 or several files, or the JSONL) as data.train, validates it, and
    # packs it with its own writer; every packing must equal ours byte for byte.
    for name, train in (("from-shards", ours), ("from-split-shards", split), ("from-jsonl", tmp_path / "o.jsonl")):
        dump = tmp_path / name
        config = _trainer_config(tmp_path / f"{name}.toml", target, train, dump, _spare_id(target))
        run = subprocess.run([str(TRAINER), "prepare", "--config", str(config)], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "30 train sequences" in run.stdout
        for file in ("index.json", "tokens-00000.bin"):
            assert (dump / "shards" / "train" / file).read_bytes() == (ours / file).read_bytes(), (name, file)


def test_max_length_cut_and_drop_are_counted(chat_dirs, tmp_path, capsys):
    rows = conversations(12, seed=2)
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "full.jsonl")
    assert code == 0, err
    lengths = [len(r["input_ids"]) for r in read_jsonl(tmp_path / "full.jsonl")]
    limit = sorted(lengths)[len(lengths) // 2]
    longer = sum(n > limit for n in lengths)
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "cut.jsonl",
                                 "--max-length", limit)
    assert code == 0, err
    assert summary(out)["cut"] == longer and summary(out)["written"] == 12
    full = read_jsonl(tmp_path / "full.jsonl")
    for row, whole in zip(read_jsonl(tmp_path / "cut.jsonl"), full):
        assert row["input_ids"] == whole["input_ids"][:limit] and row["loss_mask"] == whole["loss_mask"][:limit]
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "drop.jsonl",
                                 "--max-length", limit, "--long", "drop")
    assert code == 0, err
    assert summary(out)["dropped"] == {"longer than --max-length": longer}
    assert read_jsonl(tmp_path / "drop.jsonl") == [r for r, n in zip(full, lengths) if n <= limit]
    # A cut before the first assistant token leaves nothing to train on: dropped, not written.
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "tiny.jsonl",
                                 "--max-length", 3)
    assert code == 1 and "no loss token within --max-length" in err


def test_two_workers_write_what_one_writes(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", conversations(150, seed=3))
    outputs = []
    for workers in (1, 2):
        out_dir = tmp_path / f"w{workers}"
        code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", out_dir / "o.jsonl",
                                     "--shards", out_dir / "shards", "--workers", workers, "--chunk-size", 16)
        assert code == 0, err
        assert f"with {workers} worker(s)" in out
        files = ("o.jsonl", "shards/index.json", "shards/tokens-00000.bin")
        outputs.append([(out_dir / p).read_bytes() for p in files])
    assert outputs[0] == outputs[1]
    # An error in a worker reaches the command as it would from one process.
    bad = write_jsonl(tmp_path / "bad.jsonl", conversations(40, seed=4) + [
        {"messages": [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}]}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", bad, "--output", tmp_path / "bad-out.jsonl",
                               "--workers", 2, "--chunk-size", 8)
    assert code == 1 and f"{bad}:41: message 1 has role 'narrator'" in err
    assert not (tmp_path / "bad-out.jsonl").exists()


def test_config_supplies_target_mask_token_and_output(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", conversations(3))
    for train in (tmp_path / "train.jsonl", tmp_path / "train-shards"):
        config = _trainer_config(tmp_path / "c.toml", chat_dirs[1], train, tmp_path / "dump", _spare_id(chat_dirs[1]))
        code, out, err = run_prepare(capsys, "--config", config, "--input", data)
        assert code == 0, err
        assert summary(out)["written"] == 3 and train.exists()
    config.write_text(config.read_text().replace("mask_token_id = ", "mask_token_id = 1"))
    code, _, err = run_prepare(capsys, "--config", config, "--input", data)
    assert code == 1 and "outside [0," in err


# ---- errors ----

def _copy_target(source, destination, **config_changes):
    shutil.copytree(source, destination)
    config = json.loads((destination / "config.json").read_text())
    config.update(config_changes)
    (destination / "config.json").write_text(json.dumps(config))
    return destination


def _one(tmp_path, messages=None):
    messages = messages or [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    return write_jsonl(tmp_path / "in.jsonl", [{"messages": messages}])


def test_template_that_fails_to_render_is_reported_with_its_message(chat_dirs, tmp_path, capsys):
    template = tmp_path / "t.jinja"
    template.write_text(
        "{%- if messages[0].role == 'system' %}{{ raise_exception('This template takes no system turn') }}{% endif %}"
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    data = _one(tmp_path, [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Yo"}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl",
                               "--chat-template", template)
    assert code == 1
    assert f"{data}:1: the chat template failed to render it: TemplateError: This template takes no system turn" in err
    assert "fix:" in err


def test_tokenizer_without_chat_template_says_how_to_pass_one(chat_dirs, tmp_path, capsys):
    bare = _copy_target(chat_dirs[0], tmp_path / "bare")
    (bare / "chat_template.jinja").unlink()
    code, _, err = run_prepare(capsys, "--target", bare, "--input", _one(tmp_path), "--output", tmp_path / "o.jsonl")
    assert code == 1 and "has no chat template" in err and "--chat-template" in err
    code, _, err = run_prepare(capsys, "--target", bare, "--input", _one(tmp_path), "--output", tmp_path / "o.jsonl",
                               "--chat-template", chat_dirs[0] / "chat_template.jinja")
    assert code == 0, err


def test_slow_tokenizer_says_how_to_get_a_fast_one(chat_dirs, tmp_path, capsys):
    from transformers import ByT5Tokenizer

    ByT5Tokenizer().save_pretrained(str(tmp_path / "slow"))
    code, _, err = run_prepare(capsys, "--tokenizer", tmp_path / "slow", "--input", _one(tmp_path),
                               "--output", tmp_path / "o.jsonl")
    assert code == 1 and "slow (Python) ByT5Tokenizer" in err and "tokenizer.json" in err and "use_fast=True" in err


def test_assistant_content_missing_from_the_rendering_is_an_error(chat_dirs, tmp_path, capsys):
    template = tmp_path / "t.jinja"
    template.write_text("{%- for m in messages %}<|im_start|>{{ m.role }}\n"
                        "{{ m.content | upper if m.role == 'assistant' else m.content }}<|im_end|>\n{% endfor %}")
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", _one(tmp_path),
                               "--output", tmp_path / "o.jsonl", "--chat-template", template)
    assert code == 1
    assert f"{tmp_path / 'in.jsonl'}:1: message 1 (assistant, 'Hello.'): its content is not in its turn" in err
    assert "fix:" in err


def test_tokenizer_larger_than_the_target_vocabulary(chat_dirs, tmp_path, capsys):
    small = _copy_target(chat_dirs[0], tmp_path / "small", vocab_size=100)
    code, _, err = run_prepare(capsys, "--target", small, "--input", _one(tmp_path), "--output", tmp_path / "o.jsonl")
    assert code == 1 and "says vocab_size 100" in err and "fix:" in err


def test_mask_token_the_tokenizer_emits(chat_dirs, tokenizers, tmp_path, capsys):
    target, tokenizer = chat_dirs[0], tokenizers[0]
    ordinary = tokenizer("Hello", add_special_tokens=False)["input_ids"][0]
    code, _, err = run_prepare(capsys, "--target", target, "--input", _one(tmp_path), "--output", tmp_path / "o.jsonl",
                               "--mask-token-id", ordinary)
    assert code == 1 and "an ordinary token" in err and f"such as {len(tokenizer)}" in err
    reserved = tokenizer.convert_tokens_to_ids("<|reserved_special_token_0|>")
    code, _, err = run_prepare(capsys, "--target", target, "--input", _one(tmp_path), "--output", tmp_path / "o.jsonl",
                               "--mask-token-id", reserved)
    assert code == 0, err
    messages = [{"role": "user", "content": "Say <|reserved_special_token_0|>"},
                {"role": "assistant", "content": "No."}]
    position = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)[
        "input_ids"].index(reserved)
    data = _one(tmp_path, messages)
    code, _, err = run_prepare(capsys, "--target", target, "--input", data, "--output", tmp_path / "o.jsonl",
                               "--mask-token-id", reserved)
    assert code == 1
    assert f"{data}:1: token {position} of the tokenized conversation is drafter.mask_token_id {reserved}" in err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--replace-system-prompt"], "--replace-system-prompt needs --system-prompt"),
        (["--shards", "S"], None),
        ([], "no output"),
        (["--assistant-header", "X"], "--assistant-header and --end-of-turn go together"),
        (["--role-map", "bot"], "--role-map 'bot': expected NAME=ROLE"),
    ],
)
def test_option_errors(args, message, chat_dirs, tmp_path, capsys):
    data = _one(tmp_path)
    base = ["--input", data]
    if message is None:  # shards need the target's vocab_size; a tokenizer alone does not give it
        code, _, err = run_prepare(capsys, "--tokenizer", chat_dirs[0], *base, "--shards", tmp_path / "s")
        assert code == 1 and "--shards records the target's vocab_size" in err
        return
    output = [] if message == "no output" else ["--output", tmp_path / "o.jsonl"]
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], *base, *output, *args)
    assert code == 1 and message in err


def test_output_over_the_input_is_refused(chat_dirs, tmp_path, capsys):
    data = _one(tmp_path)
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", data)
    assert code == 1 and "is the input file" in err
