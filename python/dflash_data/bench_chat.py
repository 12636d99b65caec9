"""The target's tokenizer and chat template for the benchmark: conversations to prompt token ids
(the chat template with the generation prompt, `enable_thinking` passed only when reasoning is
asked, as z-lab's benchmark does), and generated ids back to the answer text of a later turn."""

import json
from pathlib import Path

from dflash_data.bench_datasets import BenchInputError

TOKENIZER_FIX = ("put the tokenizer files of the model the target was made from (tokenizer.json and "
                 "tokenizer_config.json, with its chat template) beside its config.json, e.g. "
                 "`hf download ORG/MODEL tokenizer.json tokenizer_config.json --local-dir {dir}`")
# A directory without one of these has no vocabulary: transformers would build an empty tokenizer
# from config.json's model_type alone.
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def load_target_tokenizer(target_dir: Path):
    """The target's tokenizer; refused with the fix when the directory has none or no chat template."""
    from transformers import AutoTokenizer

    if not (target_dir / "config.json").is_file():
        raise BenchInputError(f"target.path {target_dir} has no config.json: point target.path in the config at the "
                              "target's Hugging Face directory")
    if not any((target_dir / name).is_file() for name in VOCABULARY_FILES):
        raise BenchInputError(f"target.path {target_dir}: no usable tokenizer (none of {', '.join(VOCABULARY_FILES)}); "
                              + TOKENIZER_FIX.format(dir=target_dir))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    except Exception as e:
        raise BenchInputError(f"target.path {target_dir}: no usable tokenizer ({type(e).__name__}: {str(e)[:300]}); "
                              + TOKENIZER_FIX.format(dir=target_dir)) from e
    if not tokenizer.chat_template:
        raise BenchInputError(f"target.path {target_dir}: the tokenizer has no chat template; add 'chat_template' to "
                              f"its tokenizer_config.json or a chat_template.jinja beside it (the chat model's own, "
                              f"not the base model's); " + TOKENIZER_FIX.format(dir=target_dir))
    return tokenizer


def check_reasoning_switch(tokenizer, target_dir: Path) -> None:
    """--reasoning passes enable_thinking; a template that never reads it would silently ignore it."""
    if "enable_thinking" not in str(tokenizer.chat_template):
        raise BenchInputError(f"--reasoning: the chat template of {target_dir} has no enable_thinking switch, so "
                              "reasoning cannot be turned on; run without --reasoning")


def chat_prompt_text(tokenizer, messages: list[dict], reasoning: str | None) -> str:
    """The chat template applied with the generation prompt; enable_thinking only when reasoning is
    "on" (True) or "off" (False), never when it is None."""
    switch = {"enable_thinking": reasoning == "on"} if reasoning is not None else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **switch)


def prompt_ids(tokenizer, text: str, vocab_size: int, where: str) -> list[int]:
    """The templated text's ids (no special tokens added: the template wrote them), each in the target's vocabulary."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    outside = [i for i in ids if i >= vocab_size]
    if outside:
        raise BenchInputError(f"{where}: the tokenizer gives id {outside[0]}, outside the target's vocabulary "
                              f"(vocab_size {vocab_size} in config.json); the tokenizer is not the target's")
    return ids


def answer_text(tokenizer, completion_ids: list[int]) -> str:
    """The target's answer (its stop token already dropped) as the next turn's assistant content:
    decoded without special tokens, as z-lab's benchmark does."""
    return tokenizer.decode(completion_ids, skip_special_tokens=True)


def target_vocab_size(target_dir: Path) -> int:
    config = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    if "vocab_size" not in config:  # multimodal configs keep the language model's dims in text_config
        config = config.get("text_config", {})
    if not isinstance(config.get("vocab_size"), int):
        raise BenchInputError(f"{target_dir / 'config.json'}: no integer vocab_size")
    return config["vocab_size"]


def stop_token_ids(target_dir: Path, eval_section: dict) -> set[int]:
    """The stop ids `spec` decodes with: eval.spec_stop_token_ids, none with eval.spec_ignore_eos,
    else the target's eos_token_id from its config.json."""
    if eval_section.get("spec_ignore_eos"):
        return set()
    if eval_section.get("spec_stop_token_ids"):
        return {int(i) for i in eval_section["spec_stop_token_ids"]}
    eos = json.loads((target_dir / "config.json").read_text(encoding="utf-8")).get("eos_token_id")
    if eos is None:
        return set()
    return {int(i) for i in (eos if isinstance(eos, list) else [eos])}
