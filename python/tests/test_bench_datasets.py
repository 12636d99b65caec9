"""Tests of `dflash-data bench`'s datasets and figures: each dataset's prompt format against
hand-written strings, local copies in the hub's row formats (JSONL, JSON array, Parquet), the
errors for bad input, z-lab's seeded row choice, and the pooling of several spec runs' figures."""

import json
from pathlib import Path

import pytest

from dflash_data import bench_datasets, bench_figures
from dflash_data.bench_datasets import BenchInputError

FIXTURES = Path(__file__).parent / "bench_fixtures"


def turns_of(name):
    turns, source = bench_datasets.load_turns(name, FIXTURES)
    assert source.endswith(f"bench_fixtures/{name}" + {"mbpp": ".json"}.get(name, ".jsonl"))
    return turns


def test_gsm8k_prompt_asks_for_steps_and_a_boxed_answer():
    assert turns_of("gsm8k")[0] == [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?\n"
        "Please reason step by step, and put your final answer within \\boxed{}."]


def test_math500_prompt_asks_for_steps_and_a_boxed_answer():
    assert turns_of("math500")[1] == [
        "What is the value of $513^2 - 487^2$?\n"
        "Please reason step by step, and put your final answer within \\boxed{}."]


def test_humaneval_prompt_wraps_the_stub_in_a_python_fence():
    assert turns_of("humaneval")[2] == [
        "Write a solution to the following problem and make sure that it passes the tests:\n"
        "```python\n"
        "def add(x: int, y: int) -> int:\n"
        "    \"\"\"Add two numbers x and y\n"
        "    >>> add(2, 3)\n"
        "    5\n"
        "    \"\"\"\n"
        "\n```"]


def test_mbpp_prompt_is_the_sanitized_prompt_as_it_is():
    assert turns_of("mbpp")[0] == [
        "Write a python function to remove first and last occurrence of a given character from the string."]


def test_mt_bench_rows_give_both_user_turns():
    turns = turns_of("mt-bench")
    assert len(turns) == 2
    assert turns[0] == [
        "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
        "and must-see attractions.",
        "Rewrite your previous response. Start every sentence with the letter A."]


def test_parquet_copy_reads_like_the_jsonl(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet

    for name in ("gsm8k", "mt-bench"):
        rows = [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
        assert bench_datasets.load_turns(name, tmp_path) == (turns_of(name), str(tmp_path / f"{name}.parquet"))


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(BenchInputError, match="unknown dataset 'gsm8"):
        bench_datasets.parse_dataset_names("gsm8,mbpp")
    with pytest.raises(BenchInputError) as e:
        bench_datasets.parse_dataset_names("humaneval-x")
    assert "gsm8k, math500, humaneval, mbpp, mt-bench" in str(e.value)
    assert bench_datasets.parse_dataset_names(" mbpp , mt-bench") == ["mbpp", "mt-bench"]


def test_missing_field_names_the_file_row_and_field(tmp_path):
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "ok"}\n{"query": "no", "answer": "1"}\n')
    with pytest.raises(BenchInputError) as e:
        bench_datasets.load_turns("gsm8k", tmp_path)
    message = str(e.value)
    assert str(tmp_path / "gsm8k.jsonl") in message and "row 2" in message and "'question'" in message
    assert "answer, query" in message


def test_related_formats_get_a_hint(tmp_path):
    (tmp_path / "mbpp.jsonl").write_text('{"text": "Write a function.", "task_id": 1}\n')
    with pytest.raises(BenchInputError, match="'sanitized' config"):
        bench_datasets.load_turns("mbpp", tmp_path)
    (tmp_path / "mt-bench.jsonl").write_text('{"question_id": 81, "turns": ["a", "b"]}\n')
    with pytest.raises(BenchInputError, match="FastChat"):
        bench_datasets.load_turns("mt-bench", tmp_path)


def test_wrong_field_types_and_bad_json_name_the_row(tmp_path):
    (tmp_path / "mt-bench.jsonl").write_text('{"prompt": ["a", "b"]}\n{"prompt": "only one string"}\n')
    with pytest.raises(BenchInputError, match=r"row 2: field 'prompt' must be a non-empty list of strings"):
        bench_datasets.load_turns("mt-bench", tmp_path)
    (tmp_path / "math500.jsonl").write_text('{"problem": "x"}\n{"problem": \n')
    with pytest.raises(BenchInputError, match=r"math500.jsonl:2: not valid JSON"):
        bench_datasets.load_turns("math500", tmp_path)
    (tmp_path / "humaneval.json").write_text('[{"prompt": 3}]')
    with pytest.raises(BenchInputError, match=r"row 1: field 'prompt' must be a string, not int"):
        bench_datasets.load_turns("humaneval", tmp_path)


def test_two_copies_of_one_dataset_are_refused(tmp_path):
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "a"}\n')
    (tmp_path / "gsm8k.json").write_text('[{"question": "a"}]')
    with pytest.raises(BenchInputError, match="2 copies of gsm8k"):
        bench_datasets.load_turns("gsm8k", tmp_path)


def test_offline_without_a_local_copy_says_to_pass_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no cached copy to fall back on
    with pytest.raises(BenchInputError) as e:
        bench_datasets.load_turns("math500", tmp_path)  # tmp_path holds no math500 file
    message = str(e.value)
    assert "HuggingFaceH4/MATH-500" in message and "--data-dir" in message and "math500.jsonl" in message


def test_limit_takes_z_labs_seeded_choice():
    # z-lab's benchmark: random.Random(42).shuffle(list(range(n))), the first N kept.
    assert bench_datasets.select_rows(10, 3) == [7, 3, 2]
    assert bench_datasets.select_rows(1319, 5) == [588, 1214, 57, 906, 1252]
    assert bench_datasets.select_rows(4, None) == [0, 1, 2, 3]
    assert bench_datasets.select_rows(4, 9) == [0, 1, 2, 3]


def figures(prompt_tau, rounds, accept, micro, hist, tps, tps_target, new_tokens):
    return {"tau": sum(t for t in prompt_tau if t) / max(1, sum(1 for t in prompt_tau if t)), "tau_micro": micro,
            "accept_length": accept, "histogram": hist, "block_size": len(hist), "prompts": len(prompt_tau),
            "rounds": rounds, "new_tokens": new_tokens, "prompt_tau": prompt_tau, "tokens_per_s": tps,
            "tokens_per_s_target": tps_target, "speedup": tps / tps_target, "lossless": True,
            "tolerated_differences": 0}


def test_pooled_figures_equal_those_of_one_run_over_all_prompts():
    # Run A: prompts with tau 2 and 3 (TPOT 0.01 s and 0.03 s: mean 0.02 -> 50 tok/s; target 0.04 -> 25).
    a = figures([2.0, 3.0], 5, 2.5, 2.6, [1, 1, 3], 50.0, 25.0, 13)
    # Run B: one prompt with tau 1.5 (TPOT 0.05 s; target 0.05 s) and one whose prefill stopped it (no round).
    b = figures([1.5, 0.0], 4, 1.25, 1.5, [2, 2, 0], 10.0, 10.0, 7)
    pooled = bench_figures.pool_figures([a, b])
    assert pooled["tau"] == pytest.approx((2.0 + 3.0 + 1.5) / 3)
    assert pooled["tau_micro"] == pytest.approx((2.6 * 5 + 1.5 * 4) / 9)
    assert pooled["accept_length"] == pytest.approx((2.5 * 2 + 1.25 * 1) / 3)
    assert pooled["histogram"] == [3, 3, 3]
    assert (pooled["prompts"], pooled["rounds"], pooled["new_tokens"]) == (4, 9, 20)
    # Mean TPOT over the 4 prompts: (0.04 + 0.2) / 4 = 0.06 s; the target's (0.08 + 0.2) / 4 = 0.07 s.
    assert pooled["tokens_per_s"] == pytest.approx(1 / 0.06)
    assert pooled["tokens_per_s_target"] == pytest.approx(1 / 0.07)
    assert pooled["speedup"] == pytest.approx(0.07 / 0.06)
    assert pooled["lossless"] is True
    assert bench_figures.pool_figures([a]) == a


def test_figure_lines_show_tau_accept_length_histogram_and_speed():
    f = figures([2.0, 3.0], 5, 2.5, 2.6, [1, 1, 3], 50.0, 25.0, 13)
    text = "\n".join(bench_figures.figure_lines("gsm8k", f))
    assert "gsm8k: 2 prompts" in text and "tau 2.500" in text and "SGLang accept length 2.500" in text
    assert "tokens per round 1..3: 20.0% 20.0% 60.0%" in text
    assert "50.0 tokens/s with the drafter, 25.0 by the target alone; speedup 2.000" in text
    table = bench_figures.summary_table([("gsm8k", f)])
    assert table[1].split() == ["gsm8k", "2", "2.500", "2.500", "50.0", "25.0", "2.000"]
