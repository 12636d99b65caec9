"""Where conversations come from: local JSON, JSONL (optionally .gz) or Parquet files, a dataset directory, a
Hugging Face hub dataset (through `datasets`), or an OpenAI-format batch run of vLLM or SGLang (the requests file
joined with the output file by custom_id). Each yields (where, row) pairs; `where` names the file and the line or
row."""

import gzip
import itertools
import json
import os
import re
from pathlib import Path

from .chat_messages import BAD_STRUCTURE, BATCH_FAILED, BATCH_MISSING, CONVERSATION_COLUMNS, Dropped
from .prepare_errors import PrepareError, preview

JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
DATASETS_SUFFIXES = (".parquet", ".arrow", ".csv")


def choose_column(columns, requested, source):
    """Checks that `columns` hold the messages: the requested column, else one of CONVERSATION_COLUMNS; returns the
    requested one (None: each row takes the first of CONVERSATION_COLUMNS it has)."""
    columns = list(columns)
    if requested is not None:
        if requested not in columns:
            raise PrepareError(
                f"{source}: there is no column {requested!r}; its columns are {', '.join(map(repr, columns))}; "
                f"fix: pass --column with one of them"
            )
        return requested
    if any(name in columns for name in CONVERSATION_COLUMNS):
        return None
    raise PrepareError(
        f"{source}: no 'conversations' (ShareGPT) or 'messages' (OpenAI) column; its columns are "
        f"{', '.join(map(repr, columns)) or 'none'}; fix: pass --column NAME for the column that holds the messages"
    )


class InputSource:
    """Rows of one input; `column` and `total` (rows, or None when unknown) are known once it is opened."""

    def __init__(self, name, rows, column, total):
        self.name = name
        self._rows = rows
        self.column = column
        self.total = total

    def rows(self):
        return self._rows


def _open_text(path):
    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")


def _json_line(line, path, lineno):
    try:
        return json.loads(line)
    except ValueError as exc:
        raise PrepareError(
            f"{path}:{lineno}: not valid JSON ({exc}); fix: repair or remove the line (each line of a JSONL file is "
            f"one JSON object)"
        ) from None


def _jsonl_rows(path):
    """Rows as their raw lines: chat_messages parses them, in the worker that processes them."""
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{lineno}", line


def _count_lines(path):
    if str(path).endswith(".gz"):
        return None
    count = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


def _open_json(path, requested_column):
    """A JSON array of rows, or JSONL (also under a .json name)."""
    with _open_text(path) as f:
        head = f.read(4096).lstrip()
    if head.startswith("["):
        with _open_text(path) as f:
            try:
                items = json.load(f)
            except ValueError as exc:
                raise PrepareError(f"{path}: not valid JSON ({exc}); fix: repair the file") from None
        first = next((item for item in items if isinstance(item, dict)), {})
        column = choose_column(first.keys(), requested_column, path)
        rows = ((f"{path} item {i}", item) for i, item in enumerate(items))
        return InputSource(str(path), rows, column, len(items))
    rows = _jsonl_rows(path)
    try:
        where, first_line = next(rows)
    except StopIteration:
        raise PrepareError(f"{path}: the file holds no rows; fix: point --input at the data") from None
    first = _json_line(first_line, path, where.rsplit(":", 1)[1])
    if not isinstance(first, dict):
        raise PrepareError(
            f"{where}: a row is a JSON {type(first).__name__}, not an object; fix: write one object per line, with "
            f"the messages under 'conversations' or 'messages'"
        )
    column = choose_column(first.keys(), requested_column, path)

    def all_rows():
        yield where, first
        yield from rows

    return InputSource(str(path), all_rows(), column, _count_lines(path))


def _datasets_rows(dataset, label):
    for i, row in enumerate(dataset):
        yield f"{label} row {i}", row


def _open_with_datasets(path_or_name, split, requested_column, local):
    import datasets

    try:
        # Local data are streamed (no copy into the datasets cache); a hub dataset is downloaded into the cache,
        # from where it also loads offline.
        if local and Path(path_or_name).is_file():
            kind = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}[Path(path_or_name).suffix]
            dataset = datasets.load_dataset(kind, data_files=str(path_or_name), split="train", streaming=True)
            label = str(path_or_name)
        else:
            dataset = datasets.load_dataset(str(path_or_name), split=split, streaming=local)
            label = f"{path_or_name} ({split})"
    except ConnectionError as exc:
        raise PrepareError(
            f"cannot load the hub dataset {path_or_name!r} (there is no local file or directory of that name): {exc} "
            f"(no network, or offline mode); fix: download it "
            f"where there is network (`hf download {path_or_name} --repo-type dataset --local-dir DIR`) and pass a "
            f"local copy: --input DIR or one of its .parquet/.jsonl files"
        ) from None
    except (FileNotFoundError, ValueError) as exc:
        raise PrepareError(
            f"cannot load {path_or_name!r} with datasets: {type(exc).__name__}: {preview(exc, 300)}; fix: check the "
            f"name and --split, or pass a local .jsonl/.json/.parquet file"
        ) from None
    except Exception as exc:  # datasets' own errors (DatasetNotFoundError, DataFilesNotFoundError, ...)
        raise PrepareError(
            f"cannot load {path_or_name!r} with datasets: {type(exc).__name__}: {preview(exc, 300)}; fix: check the "
            f"name, or pass a local copy (.jsonl/.json/.parquet)"
        ) from None
    rows = _datasets_rows(dataset, label)
    columns = dataset.column_names
    if columns is None:  # a streamed dataset whose features are only known from its rows
        first = next(rows, None)
        columns = first[1].keys() if first is not None else ()
        rows = itertools.chain([first] if first is not None else [], rows)
    column = choose_column(columns, requested_column, label)
    total = None
    if hasattr(dataset, "__len__"):
        total = len(dataset)
    elif local and str(path_or_name).endswith(".parquet"):
        import pyarrow.parquet

        total = pyarrow.parquet.ParquetFile(str(path_or_name)).metadata.num_rows
    return InputSource(label, rows, column, total)


HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def _is_hub_name(spec):
    return HUB_NAME.fullmatch(spec) is not None and not spec.endswith(JSON_SUFFIXES + DATASETS_SUFFIXES)


def open_input(spec, split="train", column=None, batch_output=None):
    """The rows of --input SPEC: a local file or directory, a hub dataset name, or a batch run's requests file."""
    if batch_output is not None:
        return open_batch(spec, batch_output)
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
        return _open_with_datasets(path, split, column, local=True)
    if path.is_file():
        if str(path).endswith(JSON_SUFFIXES):
            return _open_json(path, column)
        if path.suffix in DATASETS_SUFFIXES:
            return _open_with_datasets(path, split, column, local=True)
        raise PrepareError(
            f"{path}: unknown input format {path.suffix!r}; fix: use .jsonl, .json (optionally .gz), .parquet, .arrow "
            f"or .csv, or a dataset directory"
        )
    if not _is_hub_name(spec):
        raise PrepareError(f"--input {spec}: no such file or directory; fix: check the path")
    return _open_with_datasets(spec, split, column, local=False)


# ---- OpenAI-format batch runs (vLLM `run_batch`, SGLang /v1/batches) ----


def _index_batch_output(path):
    """custom_id -> (byte offset, line) of each line of the batch output file."""
    index = {}
    offset = 0
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                record = _json_line(line, path, lineno)
                if not isinstance(record, dict) or "custom_id" not in record:
                    raise PrepareError(
                        f"{path}:{lineno}: no custom_id; fix: --batch-output takes the output file of an OpenAI-format "
                        f"batch run (vLLM run_batch -o, or an SGLang batch's output file)"
                    )
                index[record["custom_id"]] = (offset, lineno)
            offset += len(line)
    return index


def _response_message(record):
    """The assistant message of one batch output record, or the reason it has none."""
    if record.get("error"):
        return None, f"error {preview(json.dumps(record['error']), 120)}"
    response = record.get("response")
    if not isinstance(response, dict):
        return None, "no response"
    status = response.get("status_code", 200)
    if status != 200:
        return None, f"status_code {status}"
    body = response.get("body") if "body" in response else response  # early vLLM wrote the body as the response
    choices = body.get("choices") if isinstance(body, dict) else None
    if isinstance(choices, dict):  # SGLang writes the one choice as an object
        choices = [choices]
    if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
        return None, "no choices[0].message"
    message = choices[0]["message"]
    keep = ("content", "reasoning_content", "reasoning", "tool_calls")
    return {"role": "assistant", **{k: message[k] for k in keep if message.get(k) is not None}}, None


def _batch_rows(requests_path, output_path, index):
    with open(output_path, "rb") as outputs, _open_text(requests_path) as requests:
        for lineno, line in enumerate(requests, 1):
            if not line.strip():
                continue
            where = f"{requests_path}:{lineno}"
            request = _json_line(line, requests_path, lineno)
            custom_id = request.get("custom_id") if isinstance(request, dict) else None
            body = request.get("body") if isinstance(request, dict) else None
            if custom_id is None or not isinstance(body, dict):
                raise PrepareError(
                    f"{where}: not a batch request (custom_id and body); fix: --input takes the batch's requests file "
                    f"when --batch-output is given"
                )
            where = f"{where} (custom_id {custom_id!r})"
            if not isinstance(body.get("messages"), list):
                yield where, Dropped(BAD_STRUCTURE, "the request's body has no messages list")
                continue
            if custom_id not in index:
                yield where, Dropped(BATCH_MISSING, f"custom_id {custom_id!r} is not in {output_path}")
                continue
            offset, out_line = index[custom_id]
            outputs.seek(offset)
            message, problem = _response_message(_json_line(outputs.readline(), output_path, out_line))
            if message is None:
                yield where, Dropped(BATCH_FAILED, f"{output_path}:{out_line}: {problem}")
                continue
            yield where, {
                "messages": list(body["messages"]) + [message],
                "tools": body.get("tools"),
                "chat_template_kwargs": body.get("chat_template_kwargs"),
            }


def open_batch(requests_path, output_path):
    for path, flag in ((requests_path, "--input"), (output_path, "--batch-output")):
        if not Path(path).is_file():
            raise PrepareError(f"{flag} {path}: no such file; fix: check the path")
    index = _index_batch_output(output_path)
    total = _count_lines(requests_path)
    return InputSource(str(requests_path), _batch_rows(requests_path, output_path, index), "messages", total)
