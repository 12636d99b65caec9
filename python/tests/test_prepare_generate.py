"""`dflash-data prepare` for `dflash-train generate`: the prompts of --generate-prompts last and all (each equal to
transformers' apply_chat_template with the generation prompt, tokenized without special tokens), the earlier turns
of `all` replaced by the answers of earlier generate runs, and training data from generate's records (--generated:
mask 1 on the output ids, the stop token included), with the errors of each."""

import json

from prepare_fixtures.testing import chat_dirs, read_jsonl, run_prepare, summary, tokenizers, write_jsonl  # noqa: F401

HEADER = {"format": "dflash-train generate", "config_hash": "0" * 16, "max_new_tokens": 8}

ROWS = [
    {"id": "c1", "messages": [{"role": "user", "content": "What is two and two?"},
                              {"role": "assistant", "content": "Four."},
                              {"role": "user", "content": "And three more?"},
                              {"role": "assistant", "content": "Seven."}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
                  {"role": "assistant", "content": "Blue."}]},
]


def reference_ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def write_generated(path, records, header=HEADER, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]) + tail)
    return path


def test_last_regenerates_the_final_assistant_turn(chat_dirs, tokenizers, tmp_path, capsys):
    data = write_jsonl(tmp_path / "chats.jsonl", ROWS)
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts",
                                 "--output", tmp_path / "prompts.jsonl")
    assert code == 0, err
    prompts = read_jsonl(tmp_path / "prompts.jsonl")
    assert [p["id"] for p in prompts] == ["c1", f"{data}:2"]
    assert prompts[0]["prompt_ids"] == reference_ids(tokenizers[0], ROWS[0]["messages"][:3])
    assert prompts[1]["prompt_ids"] == reference_ids(tokenizers[0], ROWS[1]["messages"][:2])
    assert summary(out)["written"] == 2


def test_all_builds_each_turn_from_the_earlier_answers(chat_dirs, tokenizers, tmp_path, capsys):
    tok = tokenizers[0]
    data = write_jsonl(tmp_path / "chats.jsonl", ROWS)
    first = tmp_path / "turn-1.prompts.jsonl"
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts", "all",
                                 "--output", first)
    assert code == 0, err
    prompts = read_jsonl(first)
    assert [p["id"] for p in prompts] == ["c1#1", f"{data}:2#1"]
    assert prompts[0]["prompt_ids"] == reference_ids(tok, ROWS[0]["messages"][:1])
    # The target's answers: the first conversation's ends by its stop token (left out of the next prompt's
    # history), the second's by the budget.
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    answer = tok("Five, I think.", add_special_tokens=False)["input_ids"] + [stop]
    blue = tok("Red.", add_special_tokens=False)["input_ids"]
    answers = write_generated(tmp_path / "turn-1.jsonl", [
        {"id": "c1#1", "prompt_ids": prompts[0]["prompt_ids"], "output_ids": answer, "finish": "stop"},
        {"id": f"{data}:2#1", "prompt_ids": prompts[1]["prompt_ids"], "output_ids": blue, "finish": "length"},
    ])
    second = tmp_path / "turn-2.prompts.jsonl"
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts", "all",
                                 "--answers", answers, "--output", second)
    assert code == 0, err
    prompts = read_jsonl(second)
    assert [p["id"] for p in prompts] == ["c1#2"]
    history = [ROWS[0]["messages"][0], {"role": "assistant", "content": "Five, I think."}, ROWS[0]["messages"][2]]
    assert prompts[0]["prompt_ids"] == reference_ids(tok, history)
    assert summary(out)["finished"] == 1
    # Every turn answered: no prompt is left.
    done = write_generated(tmp_path / "turn-2.jsonl", [
        {"id": "c1#2", "prompt_ids": prompts[0]["prompt_ids"], "output_ids": blue, "finish": "length"}])
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts", "all",
                                 "--answers", answers, "--answers", done, "--output", tmp_path / "turn-3.jsonl")
    assert code == 0, err
    assert read_jsonl(tmp_path / "turn-3.jsonl") == [] and summary(out)["finished"] == 2


def test_generated_records_become_training_sequences(chat_dirs, tmp_path, capsys):
    records = [{"id": "a", "prompt_ids": [5, 6, 7], "output_ids": [8, 9, 2], "finish": "stop"},
               {"id": 7, "prompt_ids": [1], "output_ids": [3, 4], "finish": "length"}]
    # A torn last line (an interrupted generate run) is left out.
    gen = write_generated(tmp_path / "out.jsonl", records, tail='{"id": "b", "prompt_ids": [1')
    code, out, err = run_prepare(capsys, "--generated", gen, "--output", tmp_path / "train.jsonl")
    assert code == 0, err
    assert read_jsonl(tmp_path / "train.jsonl") == [
        {"input_ids": [5, 6, 7, 8, 9, 2], "loss_mask": [0, 0, 0, 1, 1, 1]},
        {"input_ids": [1, 3, 4], "loss_mask": [0, 1, 1]},
    ]
    assert summary(out)["loss_tokens"] == 5
    code, out, err = run_prepare(capsys, "--generated", gen, "--output", tmp_path / "cut.jsonl", "--max-length", "4",
                                 "--long", "drop")
    assert code == 0, err
    assert read_jsonl(tmp_path / "cut.jsonl") == [{"input_ids": [1, 3, 4], "loss_mask": [0, 1, 1]}]


def test_the_errors_name_the_file_and_the_fix(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "chats.jsonl", ROWS)
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts")
    assert code == 1 and "--generate-prompts writes prompts, not training data: give --output" in err
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--generate-prompts", "last",
                               "--answers", data, "--output", tmp_path / "p.jsonl")
    assert code == 1 and "--answers belongs to --generate-prompts all" in err
    twice = write_jsonl(tmp_path / "twice.jsonl", [ROWS[0], ROWS[0]])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", twice, "--generate-prompts",
                               "--output", tmp_path / "p.jsonl")
    assert code == 1 and "the conversation id 'c1' is given twice" in err
    bad = write_generated(tmp_path / "bad.jsonl", [], header={"hello": 1})
    code, _, err = run_prepare(capsys, "--generated", bad, "--output", tmp_path / "t.jsonl")
    assert code == 1 and f"{bad}:1: not a dflash-train generate header" in err
    code, _, err = run_prepare(capsys, "--generated", bad, "--input", data, "--output", tmp_path / "t.jsonl")
    assert code == 1 and "--generated reads dflash-train generate's outputs instead of --input" in err
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "p.jsonl").exists()
