"""What ``headscope analyze`` prints for the causal views (``workers.core.report``): the top next
tokens, the logit lens at the last position, the strongest heads of an attribution, an ablation or
a patching."""

from __future__ import annotations

from typing import Any

from workers.core.notation import head_label
from workers.core.report import num, shown, shown_tokens, signed, strongest_heads


def _at(tokens: list[str], position: int) -> str:
    """``position 10 (␣mat)``."""
    return (
        f"position {position} ({tokens[position]})"
        if 0 <= position < len(tokens)
        else f"position {position}"
    )


def _target(section: dict[str, Any], position: int) -> str:
    """The scored target at ``position``: ``␣Paris`` or ``␣Paris - ␣Rome``."""
    a = section.get("a_token")
    if a is None:
        row = section.get("target_tokens") or []
        a = row[position] if -len(row) <= position < len(row) else None
        rows_b = section.get("target_b_tokens")
        b = rows_b[position] if rows_b else None
    else:
        b = section.get("b_token")
    return shown(a) + (f" - {shown(b)}" if b is not None else "")


def continuation(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    how = (
        "greedy"
        if section.get("greedy")
        else f"temperature {num(section.get('temperature'))}, seed {section.get('seed')}"
    )
    return [
        f"{section.get('n_generated')} tokens generated ({how}): {section.get('continuation', '')!r}"
    ]


def predictions(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The top next tokens at the last position and the text's mean surprisal."""
    tokens = shown_tokens(result)
    last = len(section["top_tokens"]) - 1
    top = zip(section["top_tokens"][last], section["top_probs"][last], strict=False)
    lines = [
        f"next after {_at(tokens, last)}: " + ", ".join(f"{shown(t)} {num(p, 2)}" for t, p in top)
    ]
    bits = [b for b in section.get("surprisal_bits") or [] if b is not None]
    if bits:
        ranks = section.get("next_rank") or []
        hits = sum(1 for r in ranks if r == 1)
        lines.append(
            f"mean surprisal {num(sum(bits) / len(bits))} bits over {len(bits)} next tokens; "
            f"the top prediction was the next token {hits} times"
        )
    return lines


def logit_lens(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The top token read from each state at the last position, and where the final one first leads."""
    rows, probs = section["top_tokens"], section["top_probs"]  # [state][token]
    last = len(rows[0]) - 1
    states = range(len(rows))
    shown_states = list(states) if len(rows) <= 7 else [0, 1, 2, *range(len(rows) - 4, len(rows))]
    lines = [
        f"top token at {_at(shown_tokens(result), last)} read from X[l]: "
        + ", ".join(f"X[{s}] {shown(rows[s][last])} {num(probs[s][last], 2)}" for s in shown_states)
    ]
    final = rows[-1][last]
    first = next(s for s in states if all(rows[t][last] == final for t in range(s, len(rows))))
    lines.append(f"the final top token {shown(final)} leads from X[{first}] on")
    return lines


def logit_attribution(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The target's logit split into its parts at the chosen position, and the strongest heads."""
    p = int(section.get("position", len(section["logit"]) - 1))
    heads = [[row[p] for row in layer] for layer in section["heads"]]  # [layer][head]
    ff = [row[p] for row in section["feedforward"]]  # [layer]
    parts = (
        f"input {signed(section['input'][p])}, heads {signed(sum(map(sum, heads)))}, "
        f"feed-forwards {signed(sum(ff))}, bias {signed(section['bias'][p])}"
    )
    lines = [
        f"logit of {_target(section, p)} at {_at(shown_tokens(result), p)}: {num(section['logit'][p])} = {parts} "
        f"(error {num(section.get('max_abs_error'), 2)})",
        f"strongest heads: {strongest_heads(heads)}",
    ]
    top_ff = sorted(range(len(ff)), key=lambda i: -abs(ff[i]))[:3]
    lines.append("strongest feed-forwards: " + ", ".join(f"FF{i} {signed(ff[i])}" for i in top_ff))
    return lines


def ablation(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The heads whose ablation moves the target's score most (or the set's effect)."""
    tokens = shown_tokens(result)
    score = "l[a] - l[b]" if section.get("target_b") else "log p(target)"
    if section.get("each"):
        p = int(section.get("position", len(section["base"]) - 1))
        return [
            f"{section.get('mode')} ablation of each head; {score} of {_target(section, p)} at "
            f"{_at(tokens, p)}: {num(section['base'][p])} unablated",
            f"heads whose ablation changes it most: {strongest_heads(section['map'])}",
        ]
    effect = section.get("effect") or []
    p = len(effect) - 1
    named = ", ".join(head_label(*h) for h in section.get("heads") or [])
    return [
        f"{section.get('mode')} ablation of {named} together; {score} of {_target(section, p)} at "
        f"{_at(tokens, p)}: {num(section['base'][p])} unablated, change {signed(effect[p] if effect else None)}"
    ]


def pair_line(section: dict[str, Any]) -> str:
    """The metric of a clean/corrupted pair (patching and the circuits views share it)."""
    return (
        f"metric l[{shown(section.get('a_token'))}] - l[{shown(section.get('b_token'))}] at the last "
        f"position: clean {num(section.get('metric_clean'))}, corrupted {num(section.get('metric_corrupted'))}"
    )


def patching(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The metric's clean and corrupted values and the heads that restore the most of it."""
    return [
        pair_line(section),
        f"heads restoring the most (fraction restored): {strongest_heads(section['heads'])}",
    ]
