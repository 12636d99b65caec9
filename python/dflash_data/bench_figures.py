"""Figures of several `spec` runs pooled as if one run had decoded all their prompts (mt-bench's two
turns, and the overall line), and their human-readable lines.

Pooling is exact because every figure of `spec` is a mean over prompts or over rounds of something
each run reports: tau averages each prompt's tau over the prompts that had a round (tau 0 means
none); accept_length averages over the same prompts; tau_micro over rounds; tokens_per_s is
1 / mean time per output token over all prompts, so a run's summed TPOT is prompts / tokens_per_s."""


def _prompts_with_rounds(f: dict) -> int:
    return sum(1 for t in f["prompt_tau"] if t > 0)


def pool_figures(runs: list[dict]) -> dict:
    """The figures of `spec` over all prompts of `runs` (same block size)."""
    block_sizes = {f["block_size"] for f in runs}
    if len(block_sizes) != 1:
        raise ValueError(f"runs with different block sizes {sorted(block_sizes)} cannot be pooled")
    if len(runs) == 1:
        return dict(runs[0])
    prompts = sum(f["prompts"] for f in runs)
    rounds = sum(f["rounds"] for f in runs)
    with_rounds = sum(_prompts_with_rounds(f) for f in runs)
    prompt_tau = [t for f in runs for t in f["prompt_tau"]]
    pooled = {
        "tau": sum(t for t in prompt_tau if t > 0) / with_rounds if with_rounds else 0.0,
        "tau_micro": sum(f["tau_micro"] * f["rounds"] for f in runs) / rounds if rounds else 0.0,
        "accept_length": (sum(f["accept_length"] * _prompts_with_rounds(f) for f in runs) / with_rounds
                          if with_rounds else 0.0),
        "histogram": [sum(col) for col in zip(*(f["histogram"] for f in runs))],
        "block_size": block_sizes.pop(),
        "prompts": prompts,
        "rounds": rounds,
        "new_tokens": sum(f["new_tokens"] for f in runs),
        "prompt_tau": prompt_tau,
    }
    if all("tokens_per_s" in f for f in runs):
        def mean_tpot(key):
            return sum(f["prompts"] / f[key] for f in runs if f[key] > 0) / prompts

        tpot, tpot_target = mean_tpot("tokens_per_s"), mean_tpot("tokens_per_s_target")
        pooled["tokens_per_s"] = 1.0 / tpot if tpot > 0 else 0.0
        pooled["tokens_per_s_target"] = 1.0 / tpot_target if tpot_target > 0 else 0.0
        pooled["speedup"] = tpot_target / tpot if tpot > 0 else 0.0
        pooled["lossless"] = all(f.get("lossless", True) for f in runs)
        pooled["tolerated_differences"] = sum(f.get("tolerated_differences", 0) for f in runs)
    return pooled


def histogram_shares(f: dict) -> list[float]:
    """The share of rounds that produced 1, 2, ..., block_size tokens."""
    total = sum(f["histogram"])
    return [c / total if total else 0.0 for c in f["histogram"]]


def figure_lines(name: str, f: dict) -> list[str]:
    """A dataset's (or the overall) figures, as printed."""
    shares = " ".join(f"{100 * s:.1f}%" for s in histogram_shares(f))
    lines = [
        f"{name}: {f['prompts']} prompts, {f['new_tokens']} new tokens in {f['rounds']} rounds",
        f"  tau {f['tau']:.3f} (micro {f['tau_micro']:.3f}); SGLang accept length {f['accept_length']:.3f}",
        f"  tokens per round 1..{f['block_size']}: {shares}",
    ]
    if "tokens_per_s" in f:
        lossless = "lossless" if f.get("lossless", True) else \
            f"lossless within bf16 noise ({f.get('tolerated_differences', 0)} tolerated differences)"
        lines.append(f"  decode: {f['tokens_per_s']:.1f} tokens/s with the drafter, {f['tokens_per_s_target']:.1f} "
                     f"by the target alone; speedup {f['speedup']:.3f}; {lossless}")
    return lines


def summary_table(rows: list[tuple[str, dict]]) -> list[str]:
    """One line per dataset and the overall line: prompts, tau, accept length, tokens/s, speedup."""
    out = [f"{'dataset':<10} {'prompts':>7} {'tau':>7} {'accept':>7} {'tok/s':>10} {'target':>10} {'speedup':>8}"]
    for name, f in rows:
        out.append(f"{name:<10} {f['prompts']:>7} {f['tau']:>7.3f} {f['accept_length']:>7.3f} "
                   f"{f.get('tokens_per_s', 0.0):>10.1f} {f.get('tokens_per_s_target', 0.0):>10.1f} "
                   f"{f.get('speedup', 0.0):>8.3f}")
    return out
