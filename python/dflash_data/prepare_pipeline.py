"""The work of `dflash-data prepare` on chunks of rows: rows to conversations, one rendering each, one batched
tokenization, loss masks from the assistant spans, the --max-length policy; run in this process or in a pool of
worker processes that return their chunks in input order."""

import multiprocessing
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from .chat_messages import NO_LOSS_TOKENS, TOO_LONG, Dropped, MessageOptions, to_conversation
from .chat_render import ChatFormat, ChatRenderer, assistant_spans, loss_mask
from .prepare_errors import PrepareError
from .prepare_output import ids_bytes, jsonl_line


@dataclass(frozen=True)
class PrepareSettings:
    """Everything a worker needs to process chunks the way the main process would (picklable)."""

    tokenizer_path: str
    chat_template: str  # the text that replaced the tokenizer's (--chat-template), or None
    template_kwargs: dict
    chat_format: ChatFormat
    message_options: MessageOptions
    max_length: int = None
    long_policy: str = "cut"  # "cut" or "drop"
    mask_token_id: int = None
    mask_token_fix: str = ""
    want_jsonl: bool = True
    want_shards: bool = False
    # Tokenize on a helper thread while rendering: pays off where cores would otherwise sit idle (one worker); with
    # a worker per core the CPU is busy anyway.
    overlap: bool = True


@dataclass
class ChunkResult:
    """What one chunk gave: its sequences in input order and its counts."""

    sequences: list = field(default_factory=list)  # (jsonl line or None, ids bytes or None, mask bytes or None)
    read: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    cut: int = 0
    drops: dict = field(default_factory=dict)  # reason -> [count, first where, first detail]

    def drop(self, where, dropped):
        entry = self.drops.setdefault(dropped.reason, [0, where, dropped.detail])
        entry[0] += 1


def load_tokenizer(path, chat_template=None):
    """The fast tokenizer at `path`, its chat template replaced by `chat_template` when given."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:
        raise PrepareError(
            f"cannot load a tokenizer from {path}: {type(exc).__name__}: {exc}; fix: point --tokenizer (or --target) "
            f"at a Hugging Face directory holding tokenizer.json and tokenizer_config.json"
        ) from None
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        raise PrepareError(
            f"{path}: the tokenizer is a slow (Python) {type(tokenizer).__name__}, which gives no character offsets, "
            f"so the loss mask cannot be placed; fix: use a fast tokenizer: a directory with tokenizer.json (convert "
            f"once where the slow one loads: AutoTokenizer.from_pretrained(DIR, use_fast=True)"
            f".save_pretrained(NEW_DIR), then pass --tokenizer NEW_DIR)"
        )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


class ChunkProcessor:
    """Turns a chunk of (where, row) pairs into training sequences."""

    OVERLAP_PART = 64  # conversations rendered while the previous part is tokenized

    def __init__(self, settings, tokenizer=None):
        self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize") if settings.overlap else None
        self.settings = settings
        self.tokenizer = tokenizer or load_tokenizer(settings.tokenizer_path, settings.chat_template)
        self.backend = self.tokenizer.backend_tokenizer
        self.renderer = ChatRenderer(self.tokenizer, settings.template_kwargs)

    def render_and_mask(self, conversations):
        """Token ids and masks of conversations: [(ids list, mask bytearray)], in order.

        With settings.overlap, parts of the chunk are tokenized on a helper thread (the Rust tokenizer runs without
        the GIL) while the next part is rendered."""
        if not self.settings.overlap:
            texts, spans = self._render(conversations)
            return self._masks(self.backend.encode_batch(texts, add_special_tokens=False), texts, spans)
        results, pending = [], None
        for part in chunked(conversations, self.OVERLAP_PART):
            texts, spans = self._render(part)
            encoding = self._encoder.submit(self.backend.encode_batch, texts, add_special_tokens=False)
            if pending is not None:
                results += self._masks(pending[0].result(), *pending[1:])
            pending = (encoding, texts, spans)
        if pending is not None:
            results += self._masks(pending[0].result(), *pending[1:])
        return results

    @staticmethod
    def _masks(encodings, texts, spans):
        return [(enc.ids, loss_mask(enc, sp, len(text))) for enc, sp, text in zip(encodings, spans, texts)]

    def _render(self, conversations):
        s = self.settings
        texts, spans = [], []
        for conv in conversations:
            # Template kwargs given on the command line override a row's own (a batch request's).
            extra = {k: v for k, v in conv.template_kwargs.items() if k not in s.template_kwargs}
            try:
                text = self.renderer.render(conv.messages, conv.tools, extra)
            except PrepareError as exc:
                raise PrepareError(
                    f"{conv.where}: {exc}; fix: correct or remove this conversation, or pass a template that accepts "
                    f"it (--chat-template)"
                ) from None
            spans.append(assistant_spans(text, conv.messages, s.chat_format, conv.where))
            texts.append(text)
        return texts, spans

    def __call__(self, rows):
        s = self.settings
        result = ChunkResult(read=len(rows))
        conversations = []
        for where, row in rows:
            conv = to_conversation(where, row, s.message_options)
            if isinstance(conv, Dropped):
                result.drop(where, conv)
            else:
                conversations.append(conv)
        for conv, (ids, mask) in zip(conversations, self.render_and_mask(conversations)):
            if s.mask_token_id is not None and s.mask_token_id in ids:
                position = ids.index(s.mask_token_id)
                raise PrepareError(
                    f"{conv.where}: token {position} of the tokenized conversation is drafter.mask_token_id "
                    f"{s.mask_token_id} ({self.tokenizer.convert_ids_to_tokens(s.mask_token_id)!r}): the tokenizer "
                    f"emits it, so the drafter could not tell the mask from it; fix: {s.mask_token_fix}"
                )
            if s.max_length is not None and len(ids) > s.max_length:
                if s.long_policy == "drop":
                    result.drop(conv.where, Dropped(TOO_LONG, f"{len(ids)} tokens"))
                    continue
                ids, mask = ids[: s.max_length], mask[: s.max_length]
                result.cut += 1
            loss = mask.count(1)
            if loss == 0:
                result.drop(conv.where, Dropped(NO_LOSS_TOKENS, f"no assistant token among its first {len(ids)}"))
                continue
            result.tokens += len(ids)
            result.loss_tokens += loss
            result.sequences.append(
                (
                    jsonl_line(ids, mask) if s.want_jsonl else None,
                    ids_bytes(ids) if s.want_shards else None,
                    bytes(mask) if s.want_shards else None,
                )
            )
        return result


_worker_processor = None


def _init_worker(settings):
    global _worker_processor
    _worker_processor = ChunkProcessor(settings)


def _process_in_worker(rows):
    return _worker_processor(rows)


def chunked(rows, size):
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def process_all(rows, settings, tokenizer, workers, chunk_size, on_result):
    """Processes `rows` in chunks of `chunk_size` and calls on_result(ChunkResult) for each, in input order.

    With workers > 1 the chunks go to a pool of spawned processes (each loads the tokenizer; spawn, since the Rust
    tokenizer's threads do not survive fork), at most 2 chunks per worker in flight, so memory stays bounded. A
    worker that dies (killed, out of memory) fails the run instead of leaving its chunk waited for."""
    if workers <= 1:
        processor = ChunkProcessor(settings, tokenizer)
        for chunk in chunked(rows, chunk_size):
            on_result(processor(chunk))
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(settings,))
    try:
        pending = deque()
        for chunk in chunked(rows, chunk_size):
            pending.append(pool.submit(_process_in_worker, chunk))
            if len(pending) >= 2 * workers:
                on_result(pending.popleft().result())
        while pending:
            on_result(pending.popleft().result())
    except BrokenProcessPool as exc:
        raise PrepareError(f"a worker process died ({exc}); fix: run again with fewer --workers or less memory use "
                           f"(a smaller --chunk-size)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
