"""Running the C++ `dflash-train spec` on a prompts file: finding the binary, streaming its progress,
reading its figures (the last stdout line, JSON) and its per-prompt records (`--output`), and
turning a failure into an error that shows the end of its stderr."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from dflash_data.bench_datasets import BenchInputError

# python/dflash_data/bench_spec.py -> the repository root, whose build/ holds the C++ binaries.
REPO_ROOT = Path(__file__).resolve().parents[2]
STDERR_TAIL_LINES = 25
FIGURE_KEYS = ("tau", "accept_length", "histogram", "block_size", "prompts", "rounds", "new_tokens", "prompt_tau")


class SpecFailed(Exception):
    """`dflash-train spec` exited with an error; the message carries its stderr's tail."""


def find_dflash_train(explicit: str | None) -> Path:
    """--dflash-train, else <repo>/build/dflash-train, else dflash-train on PATH."""
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and path.stat().st_mode & 0o111):
            raise BenchInputError(f"--dflash-train {explicit}: not an executable file; build it "
                                  "(cmake --build build) or pass the path of the dflash-train binary")
        return path
    built = REPO_ROOT / "build" / "dflash-train"
    if built.is_file():
        return built
    on_path = shutil.which("dflash-train")
    if on_path:
        return Path(on_path)
    raise BenchInputError(f"dflash-train not found ({built} does not exist and it is not on PATH); build it with "
                          "`cmake -S . -B build && cmake --build build`, or pass --dflash-train PATH")


def write_prompts(path: Path, prompts: list[list[int]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for ids in prompts:
            f.write(json.dumps({"input_ids": ids}) + "\n")


def run_spec(binary: Path, config: Path, drafter: Path, prompts_file: Path, max_new_tokens: int,
             output_file: Path, label: str, echo=print) -> dict:
    """Runs spec over prompts_file and returns its figures (the JSON of its last stdout line).
    Its human lines are echoed, indented, as they come; stderr is kept for the error message."""
    command = [str(binary), "spec", "--config", str(config), "--drafter", str(drafter), "--prompts",
               str(prompts_file), "--max-new-tokens", str(max_new_tokens), "--output", str(output_file)]
    stderr_file = prompts_file.with_suffix(".stderr.txt")
    last_line = ""
    with stderr_file.open("w+", encoding="utf-8") as err:
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        except OSError as e:
            raise SpecFailed(f"{label}: cannot start {binary} ({e}); pass --dflash-train PATH") from e
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.strip():
                last_line = line
                if not line.startswith("{"):  # the JSON figures are printed in the summary instead
                    echo(f"  {line}")
        returncode = process.wait()
        err.seek(0)
        stderr_text = err.read()
    if returncode != 0:
        tail = "\n".join(stderr_text.strip().splitlines()[-STDERR_TAIL_LINES:]) or "(nothing on stderr)"
        hint = (f"\n{binary} predates spec's --output option; rebuild it (cmake --build build)"
                if "unexpected argument '--output'" in stderr_text else "")
        raise SpecFailed(f"{label}: dflash-train spec failed (exit status {returncode}); its stderr ends with:\n"
                         f"{tail}\ncommand: {' '.join(command)}{hint}")
    if stderr_text.strip():
        sys.stderr.write(stderr_text)  # warnings of a successful run are still the user's to see
    try:
        figures = json.loads(last_line)
    except json.JSONDecodeError:
        figures = None
    if not isinstance(figures, dict) or any(k not in figures for k in FIGURE_KEYS):
        raise SpecFailed(f"{label}: the last line dflash-train spec printed is not its JSON figures: {last_line!r:.200}"
                         f"; is {binary} an older build? rebuild it")
    return figures


def read_records(output_file: Path, expected: int, label: str) -> list[dict]:
    """spec's --output records, one per prompt in order; each has at least output_ids (the completion)."""
    if not output_file.is_file():
        raise SpecFailed(f"{label}: dflash-train spec wrote no {output_file}; is it a build without --output? "
                         "rebuild it")
    records = [json.loads(line) for line in output_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(records) != expected or any("output_ids" not in r for r in records):
        raise SpecFailed(f"{label}: {output_file} holds {len(records)} records with output_ids for {expected} prompts")
    return records


def completion_ids(record: dict, stop_ids: set[int]) -> list[int]:
    """The completion without a final stop token: spec's "finish" says whether it ended on one."""
    ids = list(record["output_ids"])
    stopped = record["finish"] == "stop" if "finish" in record else bool(ids) and ids[-1] in stop_ids
    return ids[:-1] if stopped and ids else ids
