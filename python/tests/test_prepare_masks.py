"""Loss masks of `dflash-data prepare`, token by token, for a Qwen3-like and a Llama 3-like chat template: a single
turn, several turns with reasoning in an earlier one (where rendering prefixes goes wrong), a system prompt, tool
calls and results, an empty assistant turn; also the renderer against transformers' apply_chat_template."""

import json

import pytest

from dflash_data.chat_render import ChatRenderer, assistant_spans, detect_chat_format
from prepare_fixtures.testing import chat_dirs, expected, read_jsonl, run_prepare, tokenizers, write_jsonl  # noqa: F401

USER = {"role": "user", "content": "Hello there, friend."}
REPLY = {"role": "assistant", "content": "Hi! Nice to meet you."}
MULTI_TURN = [
    {"role": "user", "content": "What is two plus two?"},
    {"role": "assistant", "content": "<think>\nTwo and two make four.\n</think>\n\nFour."},
    {"role": "user", "content": "And plus three?"},
    {"role": "assistant", "content": "<think>\nFour and three is seven.\n</think>\n\nSeven."},
]
TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TOOLS_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
    {"role": "tool", "content": "Sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris."},
]
EMPTY_TURNS = [
    {"role": "user", "content": "Say nothing."},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "Now say ok."},
    {"role": "assistant", "content": ""},
]

# Qwen3-like pieces (text, mask bit).
Q_START, Q_END = ("<|im_start|>", 0), ("<|im_end|>", 0)
Q_EMPTY_THINK = [("<think>", 0), ("\n\n", 0), ("</think>", 0), ("\n\n", 0)]


def q_turn(role, content):
    return [Q_START, (f"{role}\n{content}", 0), Q_END, ("\n", 0)]


def q_reply(*body):
    """An assistant turn: header 0, body pieces as given, <|im_end|> 1, the newline after it 0."""
    return [Q_START, ("assistant\n", 0), *body, ("<|im_end|>", 1), ("\n", 0)]


QWEN3_CASES = {
    "single turn": ([USER, REPLY], q_turn("user", USER["content"]) + q_reply(*Q_EMPTY_THINK, (REPLY["content"], 1))),
    "reasoning in an earlier turn": (
        MULTI_TURN,
        q_turn("user", "What is two plus two?")
        + q_reply(("Four.", 1))  # the earlier turn's reasoning is dropped by the template
        + q_turn("user", "And plus three?")
        + q_reply(("<think>", 1), ("\nFour and three is seven.\n", 1), ("</think>", 1), ("\n\nSeven.", 1)),
    ),
    "system prompt": (
        [{"role": "system", "content": "You are terse."}, USER, REPLY],
        q_turn("system", "You are terse.") + q_turn("user", USER["content"])
        + q_reply(*Q_EMPTY_THINK, (REPLY["content"], 1)),
    ),
    "tool call and result": (
        TOOLS_TURNS,
        q_turn("user", "Weather in Paris?")
        + q_reply(("<tool_call>", 1), ('\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', 1),
                  ("</tool_call>", 1))
        + [Q_START, ("user\n", 0), ("<tool_response>", 0), ("\nSunny, 21 C\n", 0), ("</tool_response>", 0), Q_END,
           ("\n", 0)]
        + q_reply(*Q_EMPTY_THINK, ("It is sunny in Paris.", 1)),
    ),
    "empty assistant turns": (
        EMPTY_TURNS,
        q_turn("user", "Say nothing.") + q_reply() + q_turn("user", "Now say ok.") + q_reply(*Q_EMPTY_THINK),
    ),
}

# Llama 3-like pieces.
L_BOS = ("<|begin_of_text|>", 0)


def l_turn(role, content):
    return [("<|start_header_id|>", 0), (role, 0), ("<|end_header_id|>", 0), (f"\n\n{content}", 0), ("<|eot_id|>", 0)]


def l_reply(*body):
    header = [("<|start_header_id|>", 0), ("assistant", 0), ("<|end_header_id|>", 0), ("\n\n", 0)]
    return header + [*body, ("<|eot_id|>", 1)]


LLAMA3_CASES = {
    "single turn": ([USER, REPLY], [L_BOS] + l_turn("user", USER["content"]) + l_reply((REPLY["content"], 1))),
    "reasoning in an earlier turn": (
        MULTI_TURN,
        [L_BOS] + l_turn("user", "What is two plus two?")
        + l_reply(("<think>", 1), ("\nTwo and two make four.\n", 1), ("</think>", 1), ("\n\nFour.", 1))  # kept whole
        + l_turn("user", "And plus three?")
        + l_reply(("<think>", 1), ("\nFour and three is seven.\n", 1), ("</think>", 1), ("\n\nSeven.", 1)),
    ),
    "system prompt": (
        [{"role": "system", "content": "You are terse."}, USER, REPLY],
        [L_BOS] + l_turn("system", "You are terse.") + l_turn("user", USER["content"]) + l_reply((REPLY["content"], 1)),
    ),
    "tool call and result": (
        TOOLS_TURNS,
        [L_BOS] + l_turn("user", "Weather in Paris?")
        + l_reply(('{"name": "get_weather", "parameters": {"city": "Paris"}}', 1))
        + l_turn("ipython", "Sunny, 21 C")
        + l_reply(("It is sunny in Paris.", 1)),
    ),
    "empty assistant turns": (
        EMPTY_TURNS,
        [L_BOS] + l_turn("user", "Say nothing.") + l_reply() + l_turn("user", "Now say ok.") + l_reply(),
    ),
}

CASES = [("qwen3", name) for name in QWEN3_CASES] + [("llama3", name) for name in LLAMA3_CASES]


def _case(flavour, name):
    return (QWEN3_CASES if flavour == "qwen3" else LLAMA3_CASES)[name]


@pytest.mark.parametrize("flavour,name", CASES)
def test_rendering_matches_apply_chat_template_and_the_expected_text(flavour, name, tokenizers):
    tokenizer = tokenizers[0 if flavour == "qwen3" else 1]
    messages, pieces = _case(flavour, name)
    text, _, _ = expected(tokenizer, pieces)
    rendered = ChatRenderer(tokenizer, {}).render(messages)
    assert rendered == tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered == text


@pytest.mark.parametrize("flavour,name", CASES)
def test_ids_and_masks_token_by_token(flavour, name, chat_dirs, tokenizers, tmp_path, capsys):
    index = 0 if flavour == "qwen3" else 1
    messages, pieces = _case(flavour, name)
    _, want_ids, want_mask = expected(tokenizers[index], pieces)
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": messages}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[index], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    (row,) = read_jsonl(tmp_path / "o.jsonl")
    assert row["input_ids"] == want_ids
    assert row["loss_mask"] == want_mask


def test_system_prompt_option_adds_and_replaces(chat_dirs, tokenizers, tmp_path, capsys):
    tokenizer = tokenizers[0]
    data = write_jsonl(
        tmp_path / "in.jsonl",
        [{"messages": [USER, REPLY]}, {"messages": [{"role": "system", "content": "Own prompt."}, USER, REPLY]}],
    )
    reply = q_turn("user", USER["content"]) + q_reply(*Q_EMPTY_THINK, (REPLY["content"], 1))
    for extra, second_system in (([], "Own prompt."), (["--replace-system-prompt"], "Be kind.")):
        out_path = tmp_path / f"o{len(extra)}.jsonl"
        code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", out_path,
                                   "--system-prompt", "Be kind.", *extra)
        assert code == 0, err
        rows = read_jsonl(out_path)
        for row, system in zip(rows, ("Be kind.", second_system)):
            _, ids, mask = expected(tokenizer, q_turn("system", system) + reply)
            assert (row["input_ids"], row["loss_mask"]) == (ids, mask)


def _prefix_slicing_sketch(tokenizer, conversation):
    """The recipe the user guide used to show: render growing prefixes and slice the new tokens by length."""
    ids, mask = [], []
    for i, turn in enumerate(conversation):
        text = tokenizer.apply_chat_template(conversation[: i + 1], tokenize=False)
        new = tokenizer(text, add_special_tokens=False)["input_ids"][len(ids):]
        ids += new
        mask += [1 if turn["role"] == "assistant" else 0] * len(new)
    return ids, mask


def test_prefix_slicing_gets_reasoning_in_an_earlier_turn_wrong(chat_dirs, tokenizers, tmp_path, capsys):
    tokenizer = tokenizers[0]
    _, want_ids, want_mask = expected(tokenizer, QWEN3_CASES["reasoning in an earlier turn"][1])
    sketch_ids, sketch_mask = _prefix_slicing_sketch(tokenizer, MULTI_TURN)
    dropped_reasoning = tokenizer("\nTwo and two make four.\n", add_special_tokens=False)["input_ids"]
    # The prefix ending with the first answer keeps its reasoning, which the whole conversation's rendering drops.
    assert sketch_ids != want_ids and sketch_mask != want_mask
    assert any(sketch_ids[i:i + len(dropped_reasoning)] == dropped_reasoning for i in range(len(sketch_ids)))
    assert not any(want_ids[i:i + len(dropped_reasoning)] == dropped_reasoning for i in range(len(want_ids)))
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": MULTI_TURN}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    (row,) = read_jsonl(tmp_path / "o.jsonl")
    assert (row["input_ids"], row["loss_mask"]) == (want_ids, want_mask)


def test_reasoning_content_field_is_rendered_and_trained_in_the_last_turn(tokenizers):
    tokenizer = tokenizers[0]
    messages = [USER, {"role": "assistant", "content": "Hi.", "reasoning_content": "Greet back.",
                       "thinking": "Greet back."}]
    pieces = q_turn("user", USER["content"]) + q_reply(
        ("<think>", 1), ("\nGreet back.\n", 1), ("</think>", 1), ("\n\nHi.", 1))
    text, _, _ = expected(tokenizer, pieces)
    assert ChatRenderer(tokenizer, {}).render(messages) == text


THINKING_PROBE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{{- 'thinking ' ~ (enable_thinking if enable_thinking is defined else 'unset') }}"
)


@pytest.mark.parametrize(
    "flag,shown", [(None, "unset"), ("--enable-thinking", "True"), ("--no-enable-thinking", "False")]
)
def test_enable_thinking_reaches_the_template_only_when_given(flag, shown, chat_dirs, tokenizers, tmp_path, capsys):
    template = tmp_path / "probe.jinja"
    template.write_text(THINKING_PROBE)
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": [USER, REPLY]}])
    args = ["--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl", "--chat-template", template]
    code, _, err = run_prepare(capsys, *args, *([flag] if flag else []))
    assert code == 0, err
    (row,) = read_jsonl(tmp_path / "o.jsonl")
    assert tokenizers[0].decode(row["input_ids"]).endswith(f"thinking {shown}")


CUSTOM_TEMPLATE = (
    "{%- for m in messages %}{{ '### ' ~ m.role|capitalize ~ ':\n' ~ m.content ~ '\n### End\n' }}{%- endfor %}"
)


def test_custom_markers_for_an_unknown_template(chat_dirs, tokenizers, tmp_path, capsys):
    template = tmp_path / "plain.jinja"
    template.write_text(CUSTOM_TEMPLATE)
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": [USER, REPLY]}])
    base = ["--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl", "--chat-template", template]
    code, _, err = run_prepare(capsys, *base)
    assert code == 1 and "cannot tell the chat format" in err and "--assistant-header" in err
    code, _, err = run_prepare(capsys, *base, "--assistant-header", "### Assistant:\\n", "--end-of-turn", "\n### End")
    assert code == 0, err
    pieces = [("### User:\nHello there, friend.\n### End\n", 0), ("### Assistant:\n", 0),
              ("Hi! Nice to meet you.\n### End", 1), ("\n", 0)]
    _, ids, mask = expected(tokenizers[0], pieces)
    (row,) = read_jsonl(tmp_path / "o.jsonl")
    assert (row["input_ids"], row["loss_mask"]) == (ids, mask)


def test_span_finder_refuses_a_header_without_its_content(tokenizers):
    tokenizer = tokenizers[0]
    fmt = detect_chat_format(tokenizer.chat_template)
    text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSomething else<|im_end|>\n"
    with pytest.raises(Exception, match="message 1 .*not in its turn"):
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        assistant_spans(text, messages, fmt, "x:1")


def test_tools_list_goes_to_the_template_and_is_not_trained_on(chat_dirs, tokenizers, tmp_path, capsys):
    tokenizer = tokenizers[0]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = TOOLS_TURNS
    system = 'system\n# Tools\n\n<tools>\n' + json.dumps(tools[0]) + "\n</tools>"
    pieces = [Q_START, (system, 0), Q_END, ("\n", 0)] + QWEN3_CASES["tool call and result"][1]
    text, ids, mask = expected(tokenizer, pieces)
    rendered = ChatRenderer(tokenizer, {}).render(messages, tools)
    assert rendered == tokenizer.apply_chat_template(messages, tools=tools, tokenize=False) == text
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": messages, "tools": tools}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    (row,) = read_jsonl(tmp_path / "o.jsonl")
    assert (row["input_ids"], row["loss_mask"]) == (ids, mask)
