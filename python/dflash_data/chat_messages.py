"""One data row to one conversation: ShareGPT (`conversations: [{from, value}]`) or OpenAI (`messages: [{role,
content}]`) messages normalized to the plain `{role, content, ...}` dicts chat templates read, or a reason to drop
the row."""

import functools
import json
from dataclasses import dataclass, field

from .prepare_errors import PrepareError

ROLES = ("system", "user", "assistant", "tool")
CONVERSATION_COLUMNS = ("conversations", "messages")  # looked for in this order when no column is given
ROLE_ALIASES = {
    "system": "system", "developer": "system",
    "user": "user", "human": "user",
    "assistant": "assistant", "gpt": "assistant", "chatgpt": "assistant", "model": "assistant",
    "function_call": "assistant",  # ShareGPT's tool call by the assistant; its value is the call as JSON
    "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool",
}
# Names a message's reasoning comes under; the template reads `reasoning_content` (and gpt-oss's `thinking`).
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")

# Why a conversation is dropped (counted in the summary).
EMPTY = "empty"
NO_ASSISTANT = "no assistant turn"
BAD_STRUCTURE = "bad structure"
NON_TEXT = "non-text content"
TOO_LONG = "longer than --max-length"
NO_LOSS_TOKENS = "no loss token within --max-length"
BATCH_FAILED = "batch request failed"
BATCH_MISSING = "no batch output"


@dataclass
class Dropped:
    """A row that is not trained on, with the reason counted and a detail shown for its first occurrence."""

    reason: str
    detail: str = ""


@dataclass
class Conversation:
    where: str  # file:line or file row N, for messages
    messages: list
    tools: list = None
    template_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MessageOptions:
    column: str = None  # None: each row's first of CONVERSATION_COLUMNS
    role_map: tuple = ()  # (name, role) pairs that extend or override ROLE_ALIASES
    system_prompt: str = None
    replace_system_prompt: bool = False


class _Drop(Exception):
    def __init__(self, reason, detail):
        super().__init__(detail)
        self.dropped = Dropped(reason, detail)


def _text_content(content, index, role):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _Drop(NON_TEXT, f"message {index} has a {kind!r} content part")
        return "".join(texts)
    if role == "tool" and isinstance(content, (dict, int, float, bool)):
        return json.dumps(content, ensure_ascii=False)
    raise _Drop(BAD_STRUCTURE, f"message {index} has content of type {type(content).__name__}")


def _plain(value, what):
    """JSON-plain copy of a nested field (the template sees plain data only); a JSON string is parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _Drop(BAD_STRUCTURE, f"{what} is a string that is not JSON") from None
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        raise _Drop(BAD_STRUCTURE, f"{what} is not JSON data") from None


def _tool_call_from_value(value):
    """ShareGPT function_call value ({"name", "arguments"} as JSON) as an OpenAI tool_calls list, or None."""
    try:
        call = json.loads(value)
    except (TypeError, ValueError):
        return None
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        return [{"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}]
    return None


def _message(raw, index, roles, where):
    if not isinstance(raw, dict):
        raise _Drop(BAD_STRUCTURE, f"message {index} is a {type(raw).__name__}, not an object")
    if raw.get("from") is not None:  # keys may be present with None values in rows read from tables
        role_name, content, role_field = raw.get("from"), raw.get("value"), "from"
    elif raw.get("role") is not None:
        role_name, content, role_field = raw.get("role"), raw.get("content"), "role"
    else:
        raise _Drop(BAD_STRUCTURE, f"message {index} has neither 'role' nor 'from'")
    if not isinstance(role_name, str):
        raise _Drop(BAD_STRUCTURE, f"message {index}: '{role_field}' is not a string")
    role = roles.get(role_name)
    if role is None:
        role = roles.get(role_name.strip().lower())
    if role is None:
        raise PrepareError(
            f"{where}: message {index} has {role_field} {role_name!r}, which is not a known role "
            f"({', '.join(sorted(ROLE_ALIASES))}); fix: map it with --role-map {role_name}=user|assistant|system|tool, "
            f"or remove such messages from the data"
        )
    message = {"role": role, "content": _text_content(content, index, role)}
    if role_name.strip().lower() == "function_call" and role == "assistant":
        calls = _tool_call_from_value(message["content"])
        if calls is not None:
            message = {"role": "assistant", "content": "", "tool_calls": calls}
    if role == "assistant":
        reasoning = next((raw[k] for k in REASONING_KEYS if isinstance(raw.get(k), str)), None)
        if reasoning is not None:
            message["reasoning_content"] = message["thinking"] = reasoning
        if raw.get("tool_calls"):
            calls = _plain(raw["tool_calls"], f"message {index}: tool_calls")
            if not isinstance(calls, list):
                raise _Drop(BAD_STRUCTURE, f"message {index}: tool_calls is not a list")
            message["tool_calls"] = calls
    for key in ("name", "tool_call_id"):
        if isinstance(raw.get(key), str):
            message[key] = raw[key]
    return message


@functools.lru_cache(maxsize=8)
def _roles(role_map):
    return {**ROLE_ALIASES, **dict(role_map)}


def to_conversation(where, row, options):
    """The row's conversation, or Dropped; a PrepareError for input no option can make sense of (unknown role)."""
    if isinstance(row, Dropped):
        return row
    if isinstance(row, str):  # a JSONL line, parsed where it is processed
        try:
            row = json.loads(row)
        except ValueError as exc:
            raise PrepareError(
                f"{where}: not valid JSON ({exc}); fix: repair or remove the line (each line of a JSONL file is "
                f"one JSON object)"
            ) from None
    roles = _roles(options.role_map)
    try:
        if not isinstance(row, dict):
            raise _Drop(BAD_STRUCTURE, f"the row is a {type(row).__name__}, not an object")
        # Tables (Parquet, datasets) give every row every column, None where a row has none.
        column = options.column or next(
            (c for c in CONVERSATION_COLUMNS if row.get(c) is not None), CONVERSATION_COLUMNS[0]
        )
        value = row.get(column)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise _Drop(BAD_STRUCTURE, f"'{column}' is a string that is not JSON") from None
        if value is None or (isinstance(value, list) and not value):
            raise _Drop(EMPTY, f"no messages in '{column}'")
        if not isinstance(value, list):
            raise _Drop(BAD_STRUCTURE, f"'{column}' is a {type(value).__name__}, not a list of messages")
        messages = [_message(raw, i, roles, where) for i, raw in enumerate(value)]
        tools = row.get("tools")
        if tools is not None and tools != "" and tools != []:
            tools = _plain(tools, "'tools'")
            if not isinstance(tools, list):
                raise _Drop(BAD_STRUCTURE, "'tools' is not a list")
        else:
            tools = None
        kwargs = row.get("chat_template_kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else {}
    except _Drop as drop:
        return drop.dropped
    _apply_system_prompt(messages, row.get("system"), options)
    if not any(m["role"] == "assistant" for m in messages):
        return Dropped(NO_ASSISTANT, f"roles {', '.join(m['role'] for m in messages)}")
    return Conversation(where, messages, tools, kwargs)


def _apply_system_prompt(messages, row_system, options):
    has_system = any(m["role"] == "system" for m in messages)
    if options.system_prompt is not None and options.replace_system_prompt:
        for m in messages:
            if m["role"] == "system":
                m["content"] = options.system_prompt
        if not has_system:
            messages.insert(0, {"role": "system", "content": options.system_prompt})
        return
    if not has_system:
        default = row_system if isinstance(row_system, str) and row_system else options.system_prompt
        if default is not None:
            messages.insert(0, {"role": "system", "content": default})


def parse_role_map(items):
    """--role-map NAME=ROLE items as (name, role) pairs."""
    pairs = []
    for item in items or ():
        for part in item.split(","):
            name, sep, role = part.partition("=")
            if not sep or not name or role not in ROLES:
                raise PrepareError(
                    f"--role-map {part!r}: expected NAME=ROLE with ROLE one of {', '.join(ROLES)} (e.g. bot=assistant)"
                )
            pairs.append((name, role))
    return tuple(pairs)

