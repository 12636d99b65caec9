"""Test fixtures of `dflash-data prepare`: a small byte-level BPE tokenizer with Qwen3's and Llama 3's chat tokens,
saved with Qwen3-like and Llama 3-like chat templates, and a target config.json; scripts/bench-prepare.py uses them
too."""

import json
import random
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent
QWEN3_TEMPLATE = FIXTURES / "qwen3_like.jinja"
LLAMA3_TEMPLATE = FIXTURES / "llama3_like.jinja"

# The pre-tokenizer pattern of Qwen2/Qwen3 and Llama 3: newlines form their own pre-tokens, so text split at a
# newline or a special token tokenizes the same as a whole, which is what the tests' expected ids rely on.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<|python_tag|>", "<|reserved_special_token_0|>",
]
# Added but not special, as in Qwen3's tokenizer.
PLAIN_ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

WORDS = (
    "the of and to in is that it for on with as was at by an be this are from or have not but what all were when "
    "we there can your which their said if do will each about how up out them then she many some so these would "
    "other into has more her two like him see time could no make than first been its who now people my made over "
    "did down only way find use may water long little very after words called just where most know get through "
    "back much before go good new write our used me man too any day same right look think also around another came "
    "come work three word must because does part even place well such here take why things help put years "
    "different away again off went old number great tell men say small every found still between name should home "
    "big give air line set own under read last never us left end along while might next sound below saw something "
    "thought both few those always looked show large often together asked house world going want school important "
    "until form food keep children feet land side without boy once animals life enough took sometimes four head "
    "above kind began almost live page got earth need far hand high year mother light parts country father let "
    "night following picture being study second eyes soon times story boys since white days ever paper hard near "
    "sentence better best across during today others however sure means knew try told young miles sun ways thing "
    "whole hear example heard several change answer room sea against top turned learn point city play toward five "
    "using himself usually function return value list array string number print import class def self error file "
    "data model token train loss mask batch step layer query tool call arguments name weather"
).split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def sentence(rng, n_min=4, n_max=14):
    text = words(rng, rng.randint(n_min, n_max))
    if rng.random() < 0.2:
        text += f" {rng.randint(0, 9999)}"
    return text[0].upper() + text[1:] + rng.choice([".", ".", "?", "!", ":"])


def paragraph(rng, sentences_min=1, sentences_max=5):
    return " ".join(sentence(rng) for _ in range(rng.randint(sentences_min, sentences_max)))


def training_text(seed=0, lines=4000):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        out.append(paragraph(rng) + rng.choice(["", "\n", "\n\n"]) + paragraph(rng))
        if rng.random() < 0.2:
            out.append(f"{rng.choice(['system', 'user', 'assistant', 'ipython'])}\n\n{sentence(rng)}")
        if rng.random() < 0.2:
            out.append(f"def {rng.choice(WORDS)}(x):\n    return x + {rng.randint(0, 99)}\n")
        if rng.random() < 0.1:
            out.append(json.dumps({rng.choice(WORDS): rng.choice(WORDS), "n": rng.randint(0, 99)}))
    return out


def build_tokenizer(vocab_size=2048):
    """A trained byte-level BPE `tokenizers.Tokenizer` holding the chat tokens of both formats."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN_ADDED_TOKENS])
    return tok


def target_config(vocab_size):
    """A Qwen3 config.json the C++ side accepts (only vocab_size matters to prepare)."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab_size,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float32",
    }


def save_tokenizer_dir(tok, directory, template_path, flavour, config_vocab=None):
    """Saves `tok` as a transformers fast tokenizer with the chat template at `template_path` (flavour picks the
    special-token roles: "qwen3" or "llama3"), and a config.json whose vocab_size is `config_vocab` (default: the
    tokenizer's size rounded up to a multiple of 64, leaving unused ids for a mask token)."""
    from transformers import PreTrainedTokenizerFast

    roles = (
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        if flavour == "qwen3"
        else {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
    fast.chat_template = Path(template_path).read_text()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(directory))
    size = tok.get_vocab_size(with_added_tokens=True)
    vocab = config_vocab if config_vocab is not None else (size + 63) // 64 * 64 + 64
    (directory / "config.json").write_text(json.dumps(target_config(vocab), indent=2) + "\n")
    return directory


def build_fixture_dirs(root):
    """Writes root/qwen3 and root/llama3 (tokenizer + template + config.json); returns both paths."""
    tok = build_tokenizer()
    qwen3 = save_tokenizer_dir(tok, Path(root) / "qwen3", QWEN3_TEMPLATE, "qwen3")
    llama3 = save_tokenizer_dir(tok, Path(root) / "llama3", LLAMA3_TEMPLATE, "llama3")
    return qwen3, llama3
