"""Inputs of `dflash-data prepare`: ShareGPT and OpenAI rows, JSON, JSONL and Parquet files, the join of a vLLM or
SGLang batch run's requests and outputs, dropped rows counted by reason, and the errors for missing columns, unknown
roles and hub datasets while offline."""

import json

import pytest

from dflash_data.chat_messages import MessageOptions, to_conversation
from prepare_fixtures.testing import (  # noqa: F401
    chat_dirs, expected, read_jsonl, run_prepare, summary, tokenizers, write_jsonl,
)

OPTIONS = MessageOptions()


def test_sharegpt_roles_and_fields():
    row = {
        "system": "Row system prompt.",
        "conversations": [
            {"from": "human", "value": "Weather?"},
            {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}})},
            {"from": "observation", "value": "Rain"},
            {"from": "GPT", "value": "It rains."},
        ],
    }
    conv = to_conversation("f:1", row, OPTIONS)
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert conv.messages[0]["content"] == "Row system prompt."
    assert conv.messages[2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert conv.messages[4]["content"] == "It rains."


def test_openai_messages_with_parts_reasoning_and_string_tools():
    row = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
            {"role": "assistant", "content": "Hi.", "reasoning": "Say hi."},
        ],
        "tools": json.dumps([{"type": "function", "function": {"name": "f"}}]),
    }
    conv = to_conversation("f:1", row, OPTIONS)
    assert conv.messages[0] == {"role": "system", "content": "Be brief."}
    assert conv.messages[1]["content"] == "Hello"
    assert conv.messages[2]["reasoning_content"] == conv.messages[2]["thinking"] == "Say hi."
    assert conv.tools == [{"type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize(
    "row,reason",
    [
        ({"messages": []}, "empty"),
        ({"conversations": None}, "empty"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
        ({"messages": "not json"}, "bad structure"),
        ({"messages": [{"content": "who?"}]}, "bad structure"),
        ({"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]}, "bad structure"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}, {"role": "assistant", "content": "x"}]},
         "non-text content"),
    ],
)
def test_malformed_rows_are_dropped_with_a_reason(row, reason):
    assert to_conversation("f:1", row, OPTIONS).reason == reason


def test_unknown_role_is_an_error_naming_the_row_and_the_fix(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"messages": [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}]},
    ])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 1
    assert f"{data}:2: message 1 has role 'narrator'" in err and "--role-map narrator=" in err
    assert not (tmp_path / "o.jsonl").exists()
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl",
                                 "--role-map", "narrator=assistant")
    assert code == 0, err
    assert summary(out)["written"] == 2


def test_drops_are_counted_by_reason_in_the_summary(chat_dirs, tmp_path, capsys):
    good = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]}
    data = write_jsonl(tmp_path / "in.jsonl", [
        good, {"conversations": []}, {"messages": [{"role": "user", "content": "x"}]}, {"messages": 5}, good,
    ])
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    record = summary(out)
    assert (record["read"], record["written"]) == (5, 2)
    assert record["dropped"] == {"empty": 1, "no assistant turn": 1, "bad structure": 1}
    assert f"(first: {data}:2: no messages in 'conversations')" in out


def test_json_array_parquet_and_dataset_directory_give_the_jsonl_result(chat_dirs, tmp_path, capsys):
    import pyarrow
    import pyarrow.parquet

    rows = [
        {"conversations": [{"from": "human", "value": f"Question {i}?"}, {"from": "gpt", "value": f"Answer {i}."}]}
        for i in range(5)
    ]
    jsonl = write_jsonl(tmp_path / "in.jsonl", rows)
    (tmp_path / "in.json").write_text(json.dumps(rows))
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), tmp_path / "in.parquet")
    (tmp_path / "dataset").mkdir()
    # Mixed ShareGPT and OpenAI rows: the table gives every row and message all keys, None where absent.
    mixed = [row if i % 2 else {"messages": [{"role": "user" if m["from"] == "human" else "assistant",
                                              "content": m["value"]} for m in row["conversations"]]}
             for i, row in enumerate(rows)]
    write_jsonl(tmp_path / "dataset" / "train.jsonl", mixed)
    results = []
    for source in (jsonl, tmp_path / "in.json", tmp_path / "in.parquet", tmp_path / "dataset"):
        out_path = tmp_path / f"{source.name}.out.jsonl"
        code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", source, "--output", out_path)
        assert code == 0, err
        results.append(read_jsonl(out_path))
    assert all(result == results[0] for result in results) and len(results[0]) == 5


def test_string_encoded_messages_column(chat_dirs, tmp_path, capsys):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    data = write_jsonl(tmp_path / "in.jsonl", [{"messages": json.dumps(messages)}])
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    assert summary(out)["written"] == 1


def test_missing_column_lists_the_columns(chat_dirs, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", [{"dialog": [], "id": 1}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl",
                               "--column", "turns")
    assert code == 1 and "there is no column 'turns'; its columns are 'dialog', 'id'" in err and "--column" in err
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 1 and "no 'conversations' (ShareGPT) or 'messages' (OpenAI) column" in err and "'dialog'" in err
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl",
                                 "--column", "dialog")
    assert code == 1 and "no conversation was written (1 read: 1 empty" in err


def test_hub_dataset_while_offline_says_to_pass_a_local_copy(chat_dirs, tmp_path, capsys):
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", "someone/chat-data",
                               "--output", tmp_path / "o.jsonl")
    assert code == 1
    assert "cannot load the hub dataset 'someone/chat-data'" in err and "local copy" in err and "--input" in err


def test_missing_local_file_and_bad_json_line(chat_dirs, tmp_path, capsys):
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", tmp_path / "nope.jsonl",
                               "--output", tmp_path / "o.jsonl")
    assert code == 1 and "no such file" in err
    data = tmp_path / "bad.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n{oops\n')
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", data, "--output", tmp_path / "o.jsonl")
    assert code == 1 and f"{data}:2: not valid JSON" in err and "fix:" in err


# ---- batch runs: requests joined with outputs by custom_id ----

def _request(custom_id, question, **body):
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "target", "messages": [{"role": "user", "content": question}], **body}}


def _vllm_output(custom_id, message):
    return {"id": f"vllm-{custom_id}", "custom_id": custom_id, "error": None,
            "response": {"status_code": 200, "request_id": f"vllm-batch-{custom_id}",
                         "body": {"object": "chat.completion", "choices": [
                             {"index": 0, "message": message, "finish_reason": "stop"}]}}}


def _sglang_output(custom_id, message):
    # SGLang's batch writer puts the one choice as an object, not a list.
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "error": None,
            "response": {"status_code": 200, "request_id": custom_id,
                         "body": {"object": "chat.completion", "choices": {"index": 0, "message": message}}}}


def test_batch_run_outputs_join_their_requests(chat_dirs, tokenizers, tmp_path, capsys):
    requests = write_jsonl(tmp_path / "requests.jsonl", [
        _request("r1", "Hello there, friend."),
        _request("r2", "Hello there, friend."),
        _request("r3", "Lost?"),
        _request("r4", "Fails?"),
        _request("r5", "Bad status?"),
    ])
    outputs = write_jsonl(tmp_path / "results.jsonl", [
        _sglang_output("r2", {"role": "assistant", "content": "Hi.", "reasoning_content": "Greet back.",
                              "tool_calls": None}),
        _vllm_output("r1", {"role": "assistant", "content": "Hi! Nice to meet you."}),
        {"id": "x", "custom_id": "r4", "response": None, "error": {"message": "out of memory"}},
        {"id": "y", "custom_id": "r5", "error": None,
         "response": {"status_code": 400, "request_id": "q", "body": None}},
    ])
    code, out, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", requests, "--batch-output", outputs,
                                 "--output", tmp_path / "o.jsonl")
    assert code == 0, err
    record = summary(out)
    assert (record["read"], record["written"]) == (5, 2)
    assert record["dropped"] == {"no batch output": 1, "batch request failed": 2}
    assert "out of memory" in out
    rows = read_jsonl(tmp_path / "o.jsonl")
    user = [("<|im_start|>", 0), ("user\nHello there, friend.", 0), ("<|im_end|>", 0), ("\n", 0),
            ("<|im_start|>", 0), ("assistant\n", 0)]
    _, ids1, mask1 = expected(tokenizers[0], user + [("<think>", 0), ("\n\n", 0), ("</think>", 0), ("\n\n", 0),
                                                     ("Hi! Nice to meet you.", 1), ("<|im_end|>", 1), ("\n", 0)])
    _, ids2, mask2 = expected(tokenizers[0], user + [("<think>", 1), ("\nGreet back.\n", 1), ("</think>", 1),
                                                     ("\n\nHi.", 1), ("<|im_end|>", 1), ("\n", 0)])
    assert [(r["input_ids"], r["loss_mask"]) for r in rows] == [(ids1, mask1), (ids2, mask2)]


def test_batch_output_without_custom_id_is_refused(chat_dirs, tmp_path, capsys):
    requests = write_jsonl(tmp_path / "requests.jsonl", [_request("r1", "Hi")])
    outputs = write_jsonl(tmp_path / "results.jsonl", [{"choices": []}])
    code, _, err = run_prepare(capsys, "--target", chat_dirs[0], "--input", requests, "--batch-output", outputs,
                               "--output", tmp_path / "o.jsonl")
    assert code == 1 and f"{outputs}:1: no custom_id" in err and "run_batch" in err
