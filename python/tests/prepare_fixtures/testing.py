"""Pytest helpers of the prepare tests: the tokenizer directories (built once per session), the expected ids and
masks of hand-written pieces, and a runner of the `dflash-data prepare` command that captures its output."""

import json
from pathlib import Path

import pytest

from dflash_data.cli import main as cli_main
from prepare_fixtures import build_fixture_dirs

_built = {}


@pytest.fixture(scope="session")
def chat_dirs(tmp_path_factory):
    """(qwen3_dir, llama3_dir): the test tokenizer with the Qwen3-like and the Llama 3-like template, each with a
    config.json; built once per test session."""
    if "dirs" not in _built:
        _built["dirs"] = build_fixture_dirs(tmp_path_factory.mktemp("chat-tokenizers"))
    return _built["dirs"]


@pytest.fixture(scope="session")
def tokenizers(chat_dirs):
    from transformers import AutoTokenizer

    return tuple(AutoTokenizer.from_pretrained(str(d)) for d in chat_dirs)


def expected(tokenizer, pieces):
    """(text, ids, mask) of pieces [(text, mask bit)], each tokenized on its own and concatenated. Pieces are cut
    at special tokens or newlines, where the pre-tokenizer splits anyway; the tests also check that the whole text
    tokenizes to the same ids, so the concatenation is a valid independent expectation."""
    ids, mask = [], []
    for text, bit in pieces:
        piece_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece_ids
        mask += [bit] * len(piece_ids)
    text = "".join(t for t, _ in pieces)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids, "pieces must not merge across boundaries"
    return text, ids, mask


def write_jsonl(path, rows):
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_prepare(capsys, *args):
    """Runs `dflash-data prepare ARGS`; returns (exit code, stdout, stderr)."""
    code = cli_main(["prepare", "--no-progress", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary(stdout):
    """The JSON record prepare prints last."""
    return json.loads(stdout.strip().splitlines()[-1])


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
