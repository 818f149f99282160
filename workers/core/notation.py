"""How heads, target tokens and tokens are written, in the dashboard and the command line alike.

One place for each, torch-free, so that every page, figure, export and the CLI read and write the
same thing (docs/dashboard.md, "One vocabulary"):

- a **head** is ``L1H9`` (layer 1, head 9): ``head_label`` writes it, ``parse_head`` reads it (and
  the older ``1.9`` of links shared before);
- a **target** (the causal and circuit views' token, or a pair ``a b`` scored ``l[a] - l[b]``) is
  typed as on a shell line: each token's text in quotes with its leading space, ``" Paris"``, two
  of them for a pair, ``" Paris" " Rome"``, or ``#123`` for a token id: ``parse_target`` reads the
  dashboard's box, ``target_words`` the CLI's words, ``format_target`` writes a target back;
- a **token** is shown as its text with a space as ``␣``, a line break as ``⏎`` and a tab as ``⇥``
  (``display_text``); a raw tokenizer piece (GPT-2's byte-level ``Ġtook``, SentencePiece's ``▁took``)
  is decoded first (``display_token``).

    >>> head_label(1, 9), parse_head("L1H9"), parse_head("1.9")
    ('L1H9', (1, 9), (1, 9))
    >>> parse_target('" Mary" " John"'), parse_target("#5"), format_target([" Paris", 12])
    ([' Mary', ' John'], 5, '" Paris" #12')
    >>> display_token("Ġtook"), display_text(" took\\n")
    ('␣took', '␣took⏎')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

Target = str | int | list[str | int] | None

# ---- heads -----------------------------------------------------------------------------------

_HEAD = re.compile(r"\s*[Ll]\s*(\d+)\s*[Hh]\s*(\d+)\s*|\s*(\d+)\s*\.\s*(\d+)\s*")


def head_label(layer: int, head: int) -> str:
    """``L{layer}H{head}``: how every page, figure, export and the CLI name a head."""
    return f"L{int(layer)}H{int(head)}"


def parse_head(value: Any) -> tuple[int, int] | None:
    """``"L1H9"`` (any case, spaces allowed), ``"1.9"`` (links shared before heads were named
    ``L1H9``) or ``[1, 9]`` -> ``(1, 9)``; None for anything else."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    if value is None or isinstance(value, bool):
        return None
    found = _HEAD.fullmatch(str(value))
    if found is None:
        return None
    layer, head = (int(x) for x in found.groups() if x is not None)
    return layer, head


def parse_heads(value: str) -> list[list[int]]:
    """Heads separated by commas or spaces, ``"L3H1, L5H0"`` (or ``"3.1,5.0"``) -> ``[[3, 1], [5, 0]]``;
    a ValueError naming the part that is not a head."""
    out = []
    for part in re.split(r"[,\s]+", value.strip()):
        if not part:
            continue
        got = parse_head(part)
        if got is None:
            raise ValueError(f"{part!r} is not a head: write heads as L3H1,L5H0")
        out.append(list(got))
    return out


# ---- targets ---------------------------------------------------------------------------------

_MARKS = {"␣": " ", "⏎": "\n", "⇥": "\t"}
_ID = re.compile(r"#?(\d+)")
TARGET_HELP = (
    'a token\'s text in quotes with its leading space (" Paris"), #ID for a token id; two of them '
    'for a pair scored l[a] - l[b] (" Paris" " Rome"); written the same in the dashboard'
)


def _unmark(text: str) -> str:
    for mark, char in _MARKS.items():
        text = text.replace(mark, char)
    return text


def _split(text: str) -> list[tuple[str, bool]]:
    """Words as a shell reads them, ``(word, quoted)``: quoted (``"..."`` or ``'...'``, kept as
    written) or bare (separated by spaces). Without quotes, ``|`` separates the two tokens of a pair
    as links shared before wrote them (``␣Paris|␣Rome``: each part as typed, its leading space
    kept), and a single word typed with a leading space keeps it (`` Paris``)."""
    if not any(q in text for q in "\"'"):
        if "|" in text:
            return [(part.rstrip(), True) if not _ID.fullmatch(part.strip()) else (part.strip(), False)
                    for part in text.split("|")]  # fmt: skip
        words = text.split()
        if len(words) == 1 and text[:1].isspace():
            return [(text.rstrip(), True)]
        return [(w, False) for w in words]
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "\"'":
            end = text.find(c, i + 1)
            if end < 0:
                raise ValueError(f"a quote is not closed in {text!r}")
            out.append((text[i + 1 : end], True))
            i = end + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "\"'":
                j += 1
            out.append((text[i:j], False))
            i = j
    return out


def _word(word: str, quoted: bool) -> str | int:
    if not quoted and (found := _ID.fullmatch(word)):
        return int(found.group(1))
    return _unmark(word)


def _one_or_pair(parts: list[str | int]) -> Target:
    if not parts:
        return None
    if len(parts) > 2:
        raise ValueError(f"a target is one token or a pair of two, got {len(parts)}")
    return parts[0] if len(parts) == 1 else parts


def parse_target(value: str | None) -> Target:
    """The dashboard's target box (typed as on a shell line, ``TARGET_HELP``) -> the request's
    ``target``: None when empty, a token's text, an id, or a pair of them. ``␣`` (a space, as the
    pages show tokens), ``⏎`` and ``⇥`` may stand for the characters; a link shared before may
    hold ``␣Paris|␣Rome``."""
    if value is None or not value.strip():
        return None
    return _one_or_pair([_word(w, q) for w, q in _split(value)])


def target_words(words: Sequence[str]) -> Target:
    """The CLI's ``--target`` words (the shell has already taken the quotes off: ``" Paris"``
    arrives as `` Paris``) -> the request's ``target``, read as ``parse_target`` reads the box; a
    single word holding quotes is read as the box is (``--target '" Paris" " Rome"'``)."""
    if len(words) == 1 and words[0][:1] in "\"'" and len(words[0]) > 1:
        try:
            return parse_target(words[0])
        except ValueError:  # a token that is a quote character itself
            pass
    return _one_or_pair([_word(w, False) if _ID.fullmatch(w) else _unmark(w) for w in words])


def format_target(value: Target) -> str:
    """A request's ``target`` as it is typed (``parse_target``'s inverse): ``" Paris" " Rome"``,
    ``#12``; empty for None."""
    if value is None:
        return ""
    parts = value if isinstance(value, list) else [value]
    out = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"#{part}")
        else:
            quote = "'" if '"' in part else '"'
            out.append(f"{quote}{part}{quote}")
    return " ".join(out)


# ---- tokens ----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (every byte as a printable character), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def display_text(text: str) -> str:
    """A token's text as every page shows it: a space is ``␣``, a line break ``⏎``, a tab ``⇥``
    (``" took"`` -> ``"␣took"``); an empty text is ``∅``."""
    shown = text.replace("\r", "").replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥")
    return shown or "∅"


def display_token(token: str) -> str:
    """A raw tokenizer piece as every page shows it: byte-level pieces (``Ġtook``, ``âĢĻ``) decoded
    to their text, SentencePiece's ``▁`` as a space, then as ``display_text``. Pieces that are not
    byte-level (``[CLS]``, ``café``, ``<s>``) stay as they are."""
    decoder = _byte_decoder()
    if token and all(c in decoder for c in token):
        try:
            return display_text(bytes(decoder[c] for c in token).decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return display_text(token.replace("▁", " "))


def token_label(token: str, text: str | None = None) -> str:
    """A token of a result as shown: its span of the text when it has one (``token_texts``), else
    the tokenizer's piece (``[CLS]``, ``<s>``: added tokens span no text)."""
    return display_text(text) if text else display_token(token)
