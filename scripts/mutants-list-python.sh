# Mutants of scripts/mutants.sh in the Python tools (python/dflash_data; sourced at the end of
# scripts/mutants-list-files.sh): the chat masks, the trackers' one-record-per-step rule and the
# benchmark's reasoning switch and pooling. Their hints are pytest arguments.
mutant "prepare: an assistant span starts at its role header" "python/tests/test_prepare_masks.py" \
  '        start = at_header + len(header)' \
  '        start = at_header'
mutant "prepare: the empty reasoning block a template inserts is trained on" "python/tests/test_prepare_masks.py" \
  '                start = block.end()' \
  '                start = start'
mutant "prepare: an assistant span stops before its end-of-turn token" "python/tests/test_prepare_masks.py" \
  '        spans.append((start, cursor))' \
  '        spans.append((start, closing_at))'
mutant "prepare: an earlier turn's reasoning searched for as rendered content" "python/tests/test_prepare_masks.py" \
  '        content = content.rsplit(fmt.think_close, 1)[1]' \
  '        content = content'
mutant "track: a record at a step already forwarded sent again after a resume" "python/tests/test_track.py" \
  '            if step <= last.get(kind, -1):' \
  '            if step < last.get(kind, -1):'
mutant "bench: enable_thinking passed without --reasoning" "python/tests/test_bench_run.py" \
  '    switch = {"enable_thinking": reasoning == "on"} if reasoning is not None else {}' \
  '    switch = {"enable_thinking": reasoning == "on"}'
mutant "bench: pooled tau counts the prompts without a round" "python/tests/test_bench_datasets.py python/tests/test_bench_run.py" \
  '        "tau": sum(t for t in prompt_tau if t > 0) / with_rounds if with_rounds else 0.0,' \
  '        "tau": sum(t for t in prompt_tau if t > 0) / len(prompt_tau) if with_rounds else 0.0,'
