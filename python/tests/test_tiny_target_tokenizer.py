"""The tiny target's tokenizer through transformers: build/dflash-train writes the walk-through's target
(configs/walkthrough/tiny-target.toml, the default job's target settings), and AutoTokenizer loads its
tokenizer.json and tokenizer_config.json: text round-trips, every id lies below the target's vocab_size, the
mask token (drafter.mask_token_id) never comes out of ordinary text, and the chat template renders as Qwen3's
does (system turn, generation prompt, enable_thinking, reasoning kept only after the last user turn).
Skipped until the binary is built."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DFLASH_TRAIN = ROOT / "build" / "dflash-train"
TARGET_CONFIG = ROOT / "configs" / "walkthrough" / "tiny-target.toml"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]

pytestmark = pytest.mark.skipif(not DFLASH_TRAIN.is_file(), reason=f"{DFLASH_TRAIN} is not built (cmake --build build)")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """The target directory `dflash-train prepare --config configs/walkthrough/tiny-target.toml` writes."""
    work = tmp_path_factory.mktemp("tiny-target")
    subprocess.run([str(DFLASH_TRAIN), "prepare", "--config", str(TARGET_CONFIG)], cwd=work, check=True,
                   capture_output=True, text=True)
    return work / tomllib.loads(TARGET_CONFIG.read_text())["target"]["path"]


@pytest.fixture(scope="module")
def tokenizer(target):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(target))


def vocab_size(target):
    return json.loads((target / "config.json").read_text())["vocab_size"]


def mask_token_id(config_path):
    return tomllib.loads(config_path.read_text())["drafter"]["mask_token_id"]


def ordinary_texts():
    """Plain text of every kind the walk-through feeds the tokenizer, and some that look like the chat tokens."""
    texts = [
        "Hello, world! What's the capital of France? It's Paris.",
        "12 + 30 = 42, and 3.14159 is close to pi.\n\n",
        "def total(numbers):\n    result = 0\n    for n in numbers:\n        result += n\n    return result\n",
        "  leading spaces, trailing spaces   \n\ttabs\tand\r\nwindows line ends\r\n",
        "Unicode: café, naïve, Über, 東京, emoji 😀👍, math ∑ x² ≤ ∞",
        "almost chat tokens: <|mask| |mask|> <mask> <|MASK|> <| im_end |> <thin k> </think",
        "",
    ]
    for path in sorted((ROOT / "configs" / "walkthrough" / "sharegpt").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            texts += [turn["value"] for turn in json.loads(line)["conversations"]]
    for path in sorted((ROOT / "python" / "tests" / "bench_fixtures").iterdir()):
        texts.append(path.read_text())
    return texts


def test_files_load_with_the_vocabulary_of_the_target(target, tokenizer):
    from tokenizers import Tokenizer

    V = vocab_size(target)
    assert V == 512
    assert not {"eos_token_id", "bos_token_id"} & set(json.loads((target / "config.json").read_text()))
    assert len(tokenizer) == V
    assert sorted(tokenizer.get_vocab().values()) == list(range(V))
    assert Tokenizer.from_file(str(target / "tokenizer.json")).get_vocab_size(with_added_tokens=True) == V
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIALS] == list(range(V - len(SPECIALS), V))
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.mask_token) == ("<|im_end|>", "<|endoftext|>",
                                                                                "<|mask|>")
    assert tokenizer.bos_token is None
    # The drafter's mask token of every tiny config is <|mask|>.
    for config in (ROOT / "configs" / "tiny.toml", TARGET_CONFIG, ROOT / "configs" / "walkthrough" / "tiny-chat.toml"):
        assert mask_token_id(config) == tokenizer.mask_token_id == V - 1, config


def test_text_round_trips_within_the_vocabulary_and_never_gives_the_mask(target, tokenizer):
    V, mask = vocab_size(target), tokenizer.mask_token_id
    texts = ordinary_texts()
    assert len(texts) > 100
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert all(0 <= i < V for i in ids), text
        assert mask not in ids, text
        assert tokenizer.decode(ids) == text
    # Byte-level BPE: merges shorten English, and the chat tokens are one token each.
    english = "The assistant answers the question and explains each step."
    assert len(tokenizer.encode(english, add_special_tokens=False)) < len(english) / 2
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.encode("a b", add_special_tokens=True) == tokenizer.encode("a b", add_special_tokens=False)
    # Decoding without special tokens keeps <think> and </think>, as Qwen3's tokenizer does.
    think = tokenizer.encode("<think>\nx\n</think>\n\nDone.<|im_end|>", add_special_tokens=False)
    assert tokenizer.decode(think, skip_special_tokens=True) == "<think>\nx\n</think>\n\nDone."


def render(tokenizer, messages, **kwargs):
    return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def test_chat_template_renders_as_qwen3s(tokenizer):
    system = {"role": "system", "content": "You are brief."}
    q1, q2 = {"role": "user", "content": "What is 2+2?"}, {"role": "user", "content": "And +3?"}
    a1 = {"role": "assistant", "content": "<think>\nadd\n</think>\n\nFour."}
    a2 = {"role": "assistant", "content": "Seven.", "reasoning_content": "3 more."}
    head = "<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    # The generation prompt, with an empty think block only when enable_thinking is false.
    assert render(tokenizer, [system, q1], add_generation_prompt=True) == head + "<|im_start|>assistant\n"
    assert render(tokenizer, [system, q1], add_generation_prompt=True, enable_thinking=True) == \
        head + "<|im_start|>assistant\n"
    assert render(tokenizer, [system, q1], add_generation_prompt=True, enable_thinking=False) == \
        head + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    # Reasoning before the last user turn is dropped; the final answer keeps its own in a think block.
    assert render(tokenizer, [system, q1, a1, q2, a2]) == (
        head + "<|im_start|>assistant\nFour.<|im_end|>\n<|im_start|>user\nAnd +3?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n3 more.\n</think>\n\nSeven.<|im_end|>\n")
    # A last answer without reasoning gets an empty think block; one in its content is kept.
    plain = {"role": "assistant", "content": "Four."}
    assert render(tokenizer, [q1, plain]) == \
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nFour.<|im_end|>\n"
    assert render(tokenizer, [q1, a1]).endswith("<|im_start|>assistant\n<think>\nadd\n</think>\n\nFour.<|im_end|>\n")
    # Tool results become one user turn of <tool_response> blocks.
    tools = [q1, {"role": "assistant", "content": "Let me check."}, {"role": "tool", "content": "4"},
             {"role": "tool", "content": "four"}]
    assert render(tokenizer, tools).endswith(
        "<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\nfour\n</tool_response><|im_end|>\n")
    # A system message later in the conversation is a turn of its own; tokenized, the template's ids stay in range.
    later = render(tokenizer, [q1, plain, {"role": "system", "content": "Be kind."}, q2], add_generation_prompt=True)
    assert "<|im_end|>\n<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nAnd +3?" in later
    ids = tokenizer.apply_chat_template([system, q1, a1, q2, a2], tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert max(ids) < len(tokenizer) - 1  # never the mask token
