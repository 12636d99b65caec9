"""The standard drafter benchmarks (gsm8k, math500, humaneval, mbpp, mt-bench): where each lives on
the Hugging Face hub, the field its rows carry, and the user turns z-lab's `dflash` benchmark makes
of a row. Rows come from the hub through `datasets.load_dataset`, or from a local copy in the hub's
own row format (JSONL, a JSON array, or Parquet)."""

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

STEP_BY_STEP = "\nPlease reason step by step, and put your final answer within \\boxed{}."
HUMANEVAL_INSTRUCTION = "Write a solution to the following problem and make sure that it passes the tests:\n"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
# z-lab's benchmark shuffles row indices with this seed and keeps the first N (--max-samples N).
SELECTION_SEED = 42


class BenchInputError(Exception):
    """Bad input for `dflash-data bench`; the message names the file or field and the fix."""


@dataclass(frozen=True)
class BenchDataset:
    name: str
    hub_id: str
    hub_config: str | None
    split: str
    field: str  # the row field the user turns are made from
    make_turns: Callable[[object], list[str]]  # the field's value -> the user turns, in order
    multi_turn: bool = False


def _one_string(value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a string, not {type(value).__name__}")
    return value


def _string_list(value) -> list[str]:
    if hasattr(value, "tolist"):  # a Parquet list column read as an array
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"a non-empty list of strings, not {value!r:.80}")
    return list(value)


DATASETS: dict[str, BenchDataset] = {
    d.name: d
    for d in (
        BenchDataset("gsm8k", "openai/gsm8k", "main", "test", "question",
                     lambda v: [_one_string(v) + STEP_BY_STEP]),
        BenchDataset("math500", "HuggingFaceH4/MATH-500", None, "test", "problem",
                     lambda v: [_one_string(v) + STEP_BY_STEP]),
        BenchDataset("humaneval", "openai/openai_humaneval", None, "test", "prompt",
                     lambda v: [HUMANEVAL_INSTRUCTION + "```python\n" + _one_string(v) + "\n```"]),
        BenchDataset("mbpp", "google-research-datasets/mbpp", "sanitized", "test", "prompt",
                     lambda v: [_one_string(v)]),
        # Each row's "prompt" holds both user turns; the second is sent after the target's own answer.
        BenchDataset("mt-bench", "HuggingFaceH4/mt_bench_prompts", None, "train", "prompt",
                     _string_list, multi_turn=True),
    )
}
# Hints for a row that lacks the field but has one of these: the field of a related format.
FIELD_HINTS = {
    ("mbpp", "text"): "this looks like mbpp's 'full' config; the benchmark uses the 'sanitized' config, "
                      "whose rows carry 'prompt'",
    ("mt-bench", "turns"): "this looks like FastChat's question.jsonl; the hub's HuggingFaceH4/mt_bench_prompts "
                           "rows carry the turns as 'prompt'",
}


def parse_dataset_names(text: str) -> list[str]:
    """`gsm8k,mt-bench` -> the names, in order; an unknown or repeated name is refused."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise BenchInputError(f"--datasets is empty; known datasets: {', '.join(DATASETS)}")
    for n in names:
        if n not in DATASETS:
            raise BenchInputError(f"--datasets: unknown dataset '{n}'; known datasets: {', '.join(DATASETS)}")
    if len(set(names)) != len(names):
        raise BenchInputError(f"--datasets names a dataset twice: {text}")
    return names


def local_copy(data_dir: Path, name: str) -> Path | None:
    """The one file `<data_dir>/<name>.jsonl|.json|.parquet`, or None."""
    found = [data_dir / (name + s) for s in LOCAL_SUFFIXES if (data_dir / (name + s)).is_file()]
    if len(found) > 1:
        raise BenchInputError(f"{data_dir} holds {len(found)} copies of {name} ({', '.join(p.name for p in found)}); "
                              "keep one")
    return found[0] if found else None


def read_local_rows(path: Path) -> list[dict]:
    """The rows of a JSONL file, a JSON array (or JSON lines named .json) or a Parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet

        try:
            return pyarrow.parquet.read_table(path).to_pylist()
        except Exception as e:
            raise BenchInputError(f"{path}: not a readable Parquet file ({e})") from e
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise BenchInputError(f"{path}: not valid JSON ({e}); write a JSON array of rows or one row "
                                  "per line") from e
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BenchInputError(f"{path}:{number}: not valid JSON ({e}); write one JSON object per line") from e
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BenchInputError(f"{path} row {number}: a JSON object is needed, not {type(row).__name__}")
    if not rows:
        raise BenchInputError(f"{path}: holds no rows")
    return rows


def load_hub_rows(d: BenchDataset) -> list[dict]:
    from datasets import load_dataset

    args = (d.hub_id,) if d.hub_config is None else (d.hub_id, d.hub_config)
    try:
        return list(load_dataset(*args, split=d.split))
    except Exception as e:
        config = f", config {d.hub_config}" if d.hub_config else ""
        raise BenchInputError(
            f"{d.name}: cannot load {d.hub_id}{config}, split {d.split} from the hub ({type(e).__name__}: "
            f"{str(e)[:300]}); offline, pass --data-dir DIR holding {d.name}.jsonl, {d.name}.json or "
            f"{d.name}.parquet with the hub's rows (field '{d.field}')") from e


def turns_of_rows(d: BenchDataset, rows: list[dict], where: str) -> list[list[str]]:
    """Each row's user turns; `where` names the source in errors (a file, or the hub id)."""
    out = []
    for number, row in enumerate(rows, 1):
        if d.field not in row:
            hint = next((h for (n, f), h in FIELD_HINTS.items() if n == d.name and f in row), None)
            raise BenchInputError(
                f"{where} row {number}: no field '{d.field}' (it has {', '.join(sorted(row)) or 'none'}); "
                + (hint if hint else f"{d.name} rows need '{d.field}' as on the hub ({d.hub_id})"))
        try:
            out.append(d.make_turns(row[d.field]))
        except ValueError as e:
            raise BenchInputError(f"{where} row {number}: field '{d.field}' must be {e}") from e
    return out


def load_turns(name: str, data_dir: Path | None) -> tuple[list[list[str]], str]:
    """The user turns of every row of `name`, and where they came from."""
    d = DATASETS[name]
    path = local_copy(data_dir, name) if data_dir else None
    if path is not None:
        return turns_of_rows(d, read_local_rows(path), str(path)), str(path)
    source = f"{d.hub_id} ({d.hub_config + ', ' if d.hub_config else ''}{d.split})"
    return turns_of_rows(d, load_hub_rows(d), source), source


def select_rows(count: int, limit: int | None) -> list[int]:
    """The row indices benchmarked: all in order, or the first `limit` of z-lab's seeded shuffle."""
    if limit is None or limit >= count:
        return list(range(count))
    order = list(range(count))
    random.Random(SELECTION_SEED).shuffle(order)
    return order[:limit]
