"""Chat rendering and loss masks: each conversation is rendered once with the whole chat template, the assistant
spans are found in that one text, and a token is trained on (mask 1) iff its first character lies in a span.

An assistant span runs from the first character after the assistant header (`<|im_start|>assistant\\n`) through the
last character of the end-of-turn token (`<|im_end|>`), as rendered: the turn's content, its reasoning where the
template keeps it, its tool calls, and the end-of-turn token. An empty reasoning block at the start of a span
(`<think>\\n\\n</think>\\n\\n`, which Qwen3's template writes by itself) is not trained on; neither is anything
outside the spans (the separator after the end-of-turn token, role headers, system, user and tool turns).
"""

import re
from dataclasses import dataclass

from .prepare_errors import PrepareError, preview


@dataclass(frozen=True)
class ChatFormat:
    """The markers that delimit assistant turns in a rendered conversation."""

    name: str
    assistant_header: str
    end_of_turn: tuple  # any of these closes an assistant turn
    think_open: str = "<think>"
    think_close: str = "</think>"

    def describe(self):
        ends = " or ".join(repr(e) for e in self.end_of_turn)
        return f"{self.name} (assistant header {self.assistant_header!r}, end of turn {ends})"


# Known formats; `detected_by` are strings that all occur in a template of that format.
KNOWN_FORMATS = (
    (ChatFormat("chatml", "<|im_start|>assistant\n", ("<|im_end|>",)), ("<|im_start|>", "<|im_end|>")),
    (
        ChatFormat("llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n", ("<|eot_id|>", "<|eom_id|>")),
        ("<|start_header_id|>", "<|eot_id|>"),
    ),
)
MARKER_OPTIONS_FIX = "give the markers with --assistant-header TEXT and --end-of-turn TEXT (\\n for a newline)"


def unescape_marker(text):
    r"""Command-line markers may spell a newline as \n, a tab as \t and a backslash as \\."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), text)


def detect_chat_format(template_text, assistant_header=None, end_of_turn=None):
    """The format of `template_text`: the given markers, else the one known format whose markers it contains."""
    if assistant_header or end_of_turn:
        if not (assistant_header and end_of_turn):
            raise PrepareError(
                "--assistant-header and --end-of-turn go together: give both (the text that opens an assistant turn "
                "and the text that closes it, e.g. '<|im_start|>assistant\\n' and '<|im_end|>')"
            )
        return ChatFormat("custom", assistant_header, tuple(end_of_turn))
    found = [fmt for fmt, markers in KNOWN_FORMATS if all(m in template_text for m in markers)]
    if len(found) != 1:
        known = ", ".join(fmt.describe() for fmt, _ in KNOWN_FORMATS)
        what = "none of" if not found else "more than one of"
        raise PrepareError(
            f"cannot tell the chat format of this chat template: it matches {what} the known formats ({known}); "
            f"fix: {MARKER_OPTIONS_FIX}"
        )
    return found[0]


def _speed_up_sandbox(environment):
    """Exact shortcuts in the sandbox's attribute access and calls, which dominate rendering time; installed only
    when the environment uses jinja2's own methods (and jinja2 3.1's Context.call), so a subclass or version that
    decides otherwise keeps its checks.

    - The verdicts of ImmutableSandboxedEnvironment.is_safe_attribute are cached by (type of object, attribute):
      it depends only on the attribute's name and on isinstance tests of the object (is_internal_attribute,
      modifies_known_mutable), never on the value.
    - `message.role` on a plain dict: SandboxedEnvironment.getattr first tries getattr(obj, name), which for a dict
      succeeds exactly for the names in dir(dict) (a dict has no instance attributes), and otherwise returns
      obj[name] or undefined. For other names the shortcut does the second step directly, without raising and
      catching AttributeError.
    - Calls of builtin functions and methods (`content.split(...)`, `.strip()`): SandboxedEnvironment.call refuses
      a callable marked `unsafe_callable` or `alters_data`, which a builtin cannot carry, and Context.call passes no
      context to a callable without `jinja_pass_arg`, which a builtin cannot carry either; so both reduce to
      dropping the `_loop_vars`/`_block_vars` keywords, calling it, and turning StopIteration into undefined."""
    import types

    import jinja2
    import jinja2.sandbox

    cls = type(environment)
    if (
        cls.is_safe_attribute is not jinja2.sandbox.ImmutableSandboxedEnvironment.is_safe_attribute
        or cls.getattr is not jinja2.sandbox.SandboxedEnvironment.getattr
        or cls.call is not jinja2.sandbox.SandboxedEnvironment.call
        or cls.is_safe_callable is not jinja2.sandbox.SandboxedEnvironment.is_safe_callable
        or not jinja2.__version__.startswith("3.1.")
    ):
        return
    check = environment.is_safe_attribute
    verdicts = {}

    def is_safe_attribute(obj, attr, value):
        key = (type(obj), attr)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = check(obj, attr, value)
        return verdict

    environment.is_safe_attribute = is_safe_attribute
    sandbox_getattr = environment.getattr
    dict_attributes = frozenset(dir(dict))

    def getattr_(obj, attribute):
        if type(obj) is dict and attribute not in dict_attributes:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return environment.undefined(obj=obj, name=attribute)
        return sandbox_getattr(obj, attribute)

    environment.getattr = getattr_
    sandbox_call = environment.call

    def call(context, obj, *args, **kwargs):
        if type(obj) is types.BuiltinFunctionType:  # builtin functions and bound builtin methods
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            try:
                return obj(*args, **kwargs)
            except StopIteration:
                return environment.undefined(
                    "value was undefined because a callable raised a StopIteration exception"
                )
        return sandbox_call(context, obj, *args, **kwargs)

    environment.call = call


class ChatRenderer:
    """Renders whole conversations with the tokenizer's chat template, as `tokenizer.apply_chat_template(messages,
    tokenize=False)` does: the template compiled in transformers' own sandboxed environment, given the tokenizer's
    special tokens and `template_kwargs`. Messages must be plain JSON data (chat_messages builds them so) with
    `reasoning_content` and `thinking` set wherever a message has reasoning, as transformers aliases them."""

    def __init__(self, tokenizer, template_kwargs):
        self._tokenizer = tokenizer
        self._kwargs = {**tokenizer.special_tokens_map, **template_kwargs}
        self._compiled = {}

    def template_text(self, tools=None):
        return self._tokenizer.get_chat_template(None, tools)

    def _compiled_template(self, text):
        if text not in self._compiled:
            try:
                from transformers.utils.chat_template_utils import _cached_compile_jinja_template
            except ImportError:  # another transformers: its public path renders the same text, only slower
                self._compiled[text] = None
            else:
                compiled = _cached_compile_jinja_template(text)
                _speed_up_sandbox(compiled.environment)
                self._compiled[text] = compiled
        return self._compiled[text]

    def render(self, messages, tools=None, template_kwargs=None, add_generation_prompt=False):
        """The rendered conversation (with the next assistant turn's header when add_generation_prompt: a prompt);
        a template error becomes a PrepareError holding the template's message."""
        kwargs = self._kwargs if not template_kwargs else {**self._kwargs, **template_kwargs}
        try:
            compiled = self._compiled_template(self.template_text(tools))
            if compiled is None:
                extra = {k: v for k, v in kwargs.items() if k not in self._tokenizer.special_tokens_map}
                return self._tokenizer.apply_chat_template(
                    messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
                )
            return compiled.render(
                messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **kwargs
            )
        except PrepareError:
            raise
        except Exception as exc:  # jinja2 errors, raise_exception() in the template, type errors inside it
            raise PrepareError(f"the chat template failed to render it: {type(exc).__name__}: {exc}") from None


def content_core(message, fmt):
    """The text of a message that the template must render verbatim: for an assistant message, the answer after its
    reasoning (Qwen3 keeps only that in earlier turns), without the surrounding whitespace templates trim."""
    content = message.get("content")
    if not isinstance(content, str):
        return ""
    if fmt.think_close and fmt.think_close in content:
        content = content.rsplit(fmt.think_close, 1)[1]
    return content.strip()


def _first_end_of_turn(text, fmt, start):
    best = None
    for marker in fmt.end_of_turn:
        at = text.find(marker, start)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, marker)
    return best


def assistant_spans(text, messages, fmt, where):
    """[start, end) character spans of the assistant turns of `messages` in their rendering `text`, in order.

    Messages are located in order from a cursor: a non-assistant message moves the cursor past its content when
    that content is found before the next assistant header; an assistant message takes the next header, its
    content must follow within the same turn, and its span ends with the first end-of-turn marker after it."""
    spans = []
    cursor = 0
    header = fmt.assistant_header
    empty_think = (
        re.compile(re.escape(fmt.think_open) + r"\s*" + re.escape(fmt.think_close) + r"\s*")
        if fmt.think_open and fmt.think_close
        else None
    )
    for index, message in enumerate(messages):
        core = content_core(message, fmt)
        if message["role"] != "assistant":
            if core:
                at = text.find(core, cursor)
                if at >= 0 and text.find(header, cursor, at) < 0:
                    cursor = at + len(core)
            continue
        at_header = text.find(header, cursor)
        if at_header < 0:
            raise PrepareError(
                f"{where}: message {index} (assistant, {preview(core)!r}): the rendered conversation has no "
                f"assistant header {header!r} for it (the template dropped the message or writes another header); "
                f"fix: check the chat template, or {MARKER_OPTIONS_FIX}"
            )
        start = at_header + len(header)
        content_start = content_end = start
        if core:
            content_start = text.find(core, start)
            if (
                content_start < 0
                or text.find(header, start, content_start) >= 0
                or any(text.find(e, start, content_start) >= 0 for e in fmt.end_of_turn)
            ):
                raise PrepareError(
                    f"{where}: message {index} (assistant, {preview(core)!r}): its content is not in its turn of the "
                    f"rendered conversation (the chat template changed or dropped it); fix: check the chat template "
                    f"(--chat-template) against the data, or {MARKER_OPTIONS_FIX}"
                )
            content_end = content_start + len(core)
        closing = _first_end_of_turn(text, fmt, content_end)
        if closing is None:
            raise PrepareError(
                f"{where}: message {index} (assistant, {preview(core)!r}): the rendered turn is not closed by "
                f"{' or '.join(repr(e) for e in fmt.end_of_turn)}; fix: {MARKER_OPTIONS_FIX}"
            )
        closing_at, closing_marker = closing
        if empty_think is not None:
            block = empty_think.match(text, start)
            if block is not None and block.end() <= (content_start if core else closing_at):
                start = block.end()
        cursor = closing_at + len(closing_marker)
        spans.append((start, cursor))
    return spans


def _first_token_from(encoding, position, n_tokens, offsets_cache):
    """Index of the first token whose first character is at or after `position` (n_tokens if none)."""
    t = encoding.char_to_token(position)
    if t is None:  # a character no token covers: search the offsets
        if not offsets_cache:
            offsets_cache.append([start for start, _ in encoding.offsets])
        starts = offsets_cache[0]
        lo, hi = 0, n_tokens
        while lo < hi:
            mid = (lo + hi) // 2
            if starts[mid] < position:
                lo = mid + 1
            else:
                hi = mid
        return lo
    # Token starts never decrease; several tokens share a start when they split one character's bytes.
    while t < n_tokens and encoding.token_to_chars(t)[0] < position:
        t += 1
    while t > 0 and encoding.token_to_chars(t - 1)[0] >= position:
        t -= 1
    return t


def loss_mask(encoding, spans, text_length):
    """The 0/1 mask of `encoding` (the tokenized rendering): 1 iff a token's first character lies in a span."""
    n_tokens = len(encoding.ids)
    mask = bytearray(n_tokens)
    offsets_cache = []
    for start, end in spans:
        if start >= end:
            continue
        first = _first_token_from(encoding, start, n_tokens, offsets_cache) if start < text_length else n_tokens
        last = _first_token_from(encoding, end, n_tokens, offsets_cache) if end < text_length else n_tokens
        if last > first:
            mask[first:last] = b"\x01" * (last - first)
    return mask
