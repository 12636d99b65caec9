#!/usr/bin/env python3
"""Speed of `dflash-data prepare` against tokenizing alone: N seeded synthetic multi-turn conversations, the test
tokenizer (python/tests/prepare_fixtures) with its Qwen3-like or Llama 3-like template. Each repeat times, in turn,

  tokenize    the conversations' rendered texts tokenized alone, batch calls of the same chunks, W workers
              (the tokenizers library's encode_batch, the call prepare makes);
  tokenize-hf the same through transformers' `tokenizer(texts)` (for reference);
  prepare     rendering + masking + tokenizing (ChunkProcessor.render_and_mask), same chunks, same W workers;
  prepare+io  the whole per-chunk work of `dflash-data prepare` (rows to messages, the above, --max-length,
              JSONL lines), same chunks and workers,

and prints the wall-clock and CPU times (the workers' processes, every thread) and their ratios to `tokenize`,
repeat by repeat. Run: .venv/bin/python scripts/bench-prepare.py [--workers 2]"""

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "python" / "tests")]

from dflash_data.chat_messages import MessageOptions, to_conversation  # noqa: E402
from dflash_data.chat_render import detect_chat_format  # noqa: E402
from dflash_data.prepare_pipeline import ChunkProcessor, PrepareSettings, chunked, load_tokenizer  # noqa: E402
from prepare_fixtures import build_fixture_dirs, paragraph, sentence  # noqa: E402


def synthetic_rows(n, seed):
    """Multi-turn conversations: an optional system prompt, 1-4 exchanges, reasoning in half the answers."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": sentence(rng)}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": paragraph(rng, 1, 4)})
            think = f"<think>\n{paragraph(rng, 2, 6)}\n</think>\n\n" if rng.random() < 0.5 else ""
            messages.append({"role": "assistant", "content": think + paragraph(rng, 3, 12)})
        rows.append((f"synthetic row {len(rows)}", {"messages": messages}))
    return rows


_processor = None


def _init(settings):
    global _processor
    _processor = ChunkProcessor(settings)


def _cpu_timed(work):
    """(tokens, CPU seconds of this process, all its threads) of one task."""
    start = time.process_time()
    tokens = work()
    return tokens, time.process_time() - start


def _tokenize(texts):
    encode = _processor.backend.encode_batch
    return _cpu_timed(lambda: sum(len(e.ids) for e in encode(texts, add_special_tokens=False)))


def _tokenize_hf(texts):
    return _cpu_timed(lambda: sum(map(len, _processor.tokenizer(texts, add_special_tokens=False)["input_ids"])))


def _prepare(conversations):
    return _cpu_timed(lambda: sum(len(ids) for ids, _ in _processor.render_and_mask(conversations)))


def _prepare_io(rows):
    return _cpu_timed(lambda: _processor(rows).tokens)


def timed(results):
    """(wall seconds, tokens, CPU seconds) of running the tasks whose (tokens, cpu) results `results` yields."""
    start = time.perf_counter()
    pairs = list(results)
    return time.perf_counter() - start, sum(t for t, _ in pairs), sum(c for _, c in pairs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--template", choices=("qwen3", "llama3"), default="qwen3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overlap", choices=("auto", "on", "off"), default="auto",
                        help="tokenize on a helper thread while rendering (auto: as prepare does, with one worker)")
    args = parser.parse_args()

    directory = build_fixture_dirs(tempfile.mkdtemp(prefix="bench-prepare-"))[0 if args.template == "qwen3" else 1]
    tokenizer = load_tokenizer(directory)
    settings = PrepareSettings(
        tokenizer_path=str(directory), chat_template=None, template_kwargs={},
        chat_format=detect_chat_format(tokenizer.chat_template), message_options=MessageOptions(),
        overlap=args.workers == 1 if args.overlap == "auto" else args.overlap == "on",
    )
    rows = synthetic_rows(args.conversations, args.seed)
    row_chunks = list(chunked(rows, args.chunk_size))
    conversation_chunks = [[to_conversation(w, r, settings.message_options) for w, r in c] for c in row_chunks]
    main_processor = ChunkProcessor(settings, tokenizer)
    text_chunks = [[main_processor.renderer.render(c.messages) for c in chunk] for chunk in conversation_chunks]

    if args.workers > 1:
        pool = multiprocessing.get_context("spawn").Pool(args.workers, initializer=_init, initargs=(settings,))
        pool.map(_tokenize, text_chunks[: args.workers])  # the workers are up before timing
        run = lambda fn, tasks: timed(pool.imap(fn, tasks, chunksize=1))
    else:
        global _processor
        _processor = main_processor
        run = lambda fn, tasks: timed(map(fn, tasks))

    figures = {name: {"wall": [], "cpu": []} for name in ("tokenize", "tokenize-hf", "prepare", "prepare+io")}
    tokens = None
    for _ in range(args.repeats):
        for name, fn, tasks in (("tokenize", _tokenize, text_chunks), ("tokenize-hf", _tokenize_hf, text_chunks),
                                ("prepare", _prepare, conversation_chunks), ("prepare+io", _prepare_io, row_chunks)):
            seconds, count, cpu = run(fn, tasks)
            assert tokens is None or count == tokens, (name, count, tokens)
            tokens = count
            figures[name]["wall"].append(seconds)
            figures[name]["cpu"].append(cpu)
    if args.workers > 1:
        pool.close()

    print(f"bench-prepare: {args.conversations} conversations, {tokens} tokens, {args.template} template, "
          f"{args.workers} worker(s), chunks of {args.chunk_size}, overlap {'on' if settings.overlap else 'off'}, "
          f"{args.repeats} repeats, {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.2f} at the end)")
    for name, times in figures.items():
        wall = [t / b for t, b in zip(times["wall"], figures["tokenize"]["wall"])]
        cpu = [t / b for t, b in zip(times["cpu"], figures["tokenize"]["cpu"])]
        median = statistics.median(times["wall"])
        print(f"  {name:<11} wall median {median:.3f} s ({tokens / median / 1e3:.0f}k tokens/s), CPU median "
              f"{statistics.median(times['cpu']):.3f} s; ratio to tokenize: wall median {statistics.median(wall):.2f} "
              f"({' '.join(f'{r:.2f}' for r in wall)}), CPU median {statistics.median(cpu):.2f} "
              f"({' '.join(f'{r:.2f}' for r in cpu)})")


if __name__ == "__main__":
    main()
