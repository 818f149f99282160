"""What can be checked of a text request without the model: the API's before it queues, the CLI's
before it loads the model. Each analysis adds its own checks (its spec's ``check``); the catalogue
entry's facts and the tokenizer (``backend.tokens``, no torch) answer them."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from backend.tokens import count_tokens, is_blank
from workers.core import registry
from workers.core.errors import EmptyTextError, OutOfRangeError, TextTooLongError
from workers.models.catalogue import ModelSpec, get_catalogue


@lru_cache(maxsize=64)
def model_facts(spec: ModelSpec) -> dict[str, Any]:
    """Layers, heads, token limit of a catalogue entry (its config.json, read once)."""
    return spec.summary()


def check_text_request(*, model: str, name: str, text: str, kinds: list[str], options: Any) -> None:
    """Layer, head and state ranges (whichever analyses read them), a text that is not blank and fits the model's limit (unless
    ``truncate``), then every requested analysis' own checks; a ``HeadscopeError`` naming the
    problem. ``model``: the name asked for; ``name``: its catalogue entry (a LasF layer's base)."""
    spec = get_catalogue().get(name)
    facts = model_facts(spec)
    o = options
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    specs = [registry.get(k) for k in kinds]
    if isinstance(o.layer, int) and n_layers:
        top = n_layers if all(s.layer_is_state for s in specs) else n_layers - 1
        if not 0 <= o.layer <= top:
            raise OutOfRangeError(f"layer {o.layer} is out of range: {model} has layers 0-{top}")
    if isinstance(o.head, int) and n_heads and not 0 <= o.head < n_heads:
        raise OutOfRangeError(f"head {o.head} is out of range: {model} has heads 0-{n_heads - 1}")
    state = getattr(o, "hidden_layer", None)  # a hidden state: 0 .. n_layers
    if isinstance(state, int) and n_layers and not 0 <= state <= n_layers:
        raise OutOfRangeError(
            f"hidden_layer {state} is out of range: {model} has states 0-{n_layers} "
            f"(0 = embedding output, l + 1 = output of layer l)"
        )
    if is_blank(spec, text):
        raise EmptyTextError(
            "the text is empty after normalisation (only invisible or control characters)"
        )
    request = registry.RequestFacts(
        model=model,
        text=text,
        kinds=frozenset(kinds),
        facts=facts,
        count=lambda t, special=True: count_tokens(spec, t, special=special),
        flat=o,
    )
    if not o.truncate and any("whole_text" in s.needs for s in specs):
        counted = request.tokens()
        if counted is not None and counted[0] > counted[1]:
            raise TextTooLongError(count=counted[0], limit=counted[1], model=model)
    done: set[Any] = set()
    for s in specs:
        own = s.options_of(o)
        for hook in s.checks():
            if hook not in done:  # a check several analyses share runs once
                done.add(hook)
                registry.resolve(hook)(request, own)
