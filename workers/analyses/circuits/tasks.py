"""Task data sets for circuits on a set (docs/circuits.md, "Circuits on a task data set"; SPEC 14).

An example is a clean and a corrupted text of the same token length and two answer tokens: ``answer``
(the right one on the clean text) and ``wrong``; the metric is ``l[answer] - l[wrong]`` at the last
position. Built in, generated from a seed: ``ioi`` (the indirect-object templates of Wang et al. 2022;
the corrupted text has another example's two names, answer = the indirect object, wrong = the subject)
and ``capitals`` (a landmark "is located in the city of", the corrupted text another landmark of the
same token length in another city). Uploads: JSON Lines, one example per line.

Torch-free: ``tokenizer`` is the model's own (a Hugging Face tokenizer: ``tokenizer(text)`` encodes with
the model's special tokens, ``add_special_tokens=False`` without).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from workers.core.errors import BadFileError, HeadscopeError
from workers.inputs.task_sets import FIELDS, read_rows

TASKS = ("ioi", "capitals")


@dataclass(frozen=True)
class Example:
    clean: str
    corrupted: str
    answer: str  # one token, leading space included (" Mary")
    wrong: str
    line: int | None = None  # the upload's line (1-based)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _ids(tokenizer: Any, text: str, special: bool = True) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def single_token(tokenizer: Any, piece: str) -> int | None:
    """The id of ``piece`` when it is exactly one token for ``tokenizer``, else None."""
    ids = _ids(tokenizer, piece, special=False)
    return int(ids[0]) if len(ids) == 1 else None


def check_example(tokenizer: Any, ex: Example) -> str | None:
    """Why ``ex`` is not a usable example for ``tokenizer`` (None: it is)."""
    for name in FIELDS:
        if not isinstance(getattr(ex, name), str) or not getattr(ex, name):
            return f"{name!r} must be a non-empty string"
    n_c, n_k = len(_ids(tokenizer, ex.clean)), len(_ids(tokenizer, ex.corrupted))
    if n_c != n_k:
        return f"the clean text has {n_c} tokens and the corrupted text {n_k}; they must be the same length"
    a, b = single_token(tokenizer, ex.answer), single_token(tokenizer, ex.wrong)
    if a is None or b is None:
        bad = ex.answer if a is None else ex.wrong
        return f"{bad!r} is not one token (answers are single tokens, leading space included)"
    if a == b:
        return "the answer and the wrong token are the same token"
    return None


# ---------------------------------------------------------------- IOI (Wang et al. 2022)

NAMES = (
    "Mary John Alice Bob Tom James Michael David Sarah Emma Anna Lisa Paul Mark Kate Jack Laura Daniel "
    "Rachel Peter Steven Linda Jessica Kevin Brian Amy Jennifer Robert William Richard Thomas Charles "
    "Joseph Andrew Edward George Henry Frank Helen Susan Karen Nancy Betty Eric Jason Ryan Adam Chris "
    "Sam Max Ben Dan Tim Joe Rose Grace Jane Lucy Kelly Scott Greg Jeff Alex"
).split()
PLACES = (
    "store",
    "garden",
    "restaurant",
    "school",
    "hospital",
    "office",
    "station",
    "house",
    "park",
)
OBJECTS = ("drink", "ring", "book", "kiss", "bone", "basketball", "computer", "necklace", "snack")
# [A] is the indirect object (the answer), [B] the subject (said twice); ABBA and BABA orders
IOI_TEMPLATES = (
    "When [A] and [B] went to the [PLACE], [B] gave a [OBJECT] to",
    "When [B] and [A] went to the [PLACE], [B] gave a [OBJECT] to",
    "Then, [A] and [B] went to the [PLACE]. [B] gave a [OBJECT] to",
    "Then, [B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to",
    "After [A] and [B] went to the [PLACE], [B] gave a [OBJECT] to",
    "After [B] and [A] went to the [PLACE], [B] gave a [OBJECT] to",
    "While [A] and [B] were working at the [PLACE], [B] gave a [OBJECT] to",
    "While [B] and [A] were working at the [PLACE], [B] gave a [OBJECT] to",
    "Then, [A] and [B] had a long argument, and afterwards [B] said to",
    "Then, [B] and [A] had a long argument, and afterwards [B] said to",
    "When [A] and [B] got a [OBJECT] at the [PLACE], [B] decided to give it to",
    "When [B] and [A] got a [OBJECT] at the [PLACE], [B] decided to give it to",
    "Friends [A] and [B] found a [OBJECT] at the [PLACE]. [B] gave it to",
    "Friends [B] and [A] found a [OBJECT] at the [PLACE]. [B] gave it to",
    "The [PLACE] [A] and [B] went to had a [OBJECT]. [B] gave it to",
    "The [PLACE] [B] and [A] went to had a [OBJECT]. [B] gave it to",
)


def _fill(template: str, a: str, b: str, place: str, obj: str) -> str:
    return (
        template.replace("[A]", a)
        .replace("[B]", b)
        .replace("[PLACE]", place)
        .replace("[OBJECT]", obj)
    )


def one_token_words(tokenizer: Any, words: Iterable[str]) -> list[str]:
    """The words whose " word" is one token for ``tokenizer`` (in the given order)."""
    return [w for w in words if single_token(tokenizer, " " + w) is not None]


def ioi(
    tokenizer: Any, n: int, seed: int = 0, *, names: Iterable[str] | None = None
) -> list[Example]:
    """``n`` IOI examples drawn with ``seed``: a template, a place, an object and two names A (indirect
    object) and B (subject) per example; the corrupted text is the same sentence with the two names of
    another example (both different from A and B). Only names that are one token (with their leading
    space) for ``tokenizer`` are used, so clean and corrupted have the same length; each example is
    checked (``check_example``) and one that fails is drawn again."""
    pool = one_token_words(tokenizer, names if names is not None else NAMES)
    if len(pool) < 4:
        raise HeadscopeError(
            f"ioi needs at least 4 names that are one token for this tokenizer; it has {len(pool)}"
        )
    rng = random.Random(seed)
    pairs = [tuple(rng.sample(pool, 2)) for _ in range(n)]  # (A, B) of every example
    out: list[Example] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 20 * n + 100:
            raise HeadscopeError(
                f"ioi: could not draw {n} examples of equal token length for this tokenizer"
            )
        i = len(out)
        a, b = pairs[i]
        t, place, obj = (
            rng.choice(IOI_TEMPLATES),
            rng.choice(PLACES),
            rng.choice(OBJECTS),
        )
        j = rng.randrange(n)  # another example's names, neither of them A or B
        a2, b2 = pairs[j]
        if {a2, b2} & {a, b}:
            a2, b2 = rng.sample([x for x in pool if x not in (a, b)], 2)
        ex = Example(_fill(t, a, b, place, obj), _fill(t, a2, b2, place, obj), " " + a, " " + b)
        if check_example(tokenizer, ex) is None:
            out.append(ex)
        else:
            pairs[i] = tuple(rng.sample(pool, 2))
    return out


# ---------------------------------------------------------------- factual recall: capitals

LANDMARKS = (
    ("The Eiffel Tower", "Paris"), ("The Louvre", "Paris"), ("Notre-Dame Cathedral", "Paris"),
    ("The Arc de Triomphe", "Paris"), ("The Colosseum", "Rome"), ("The Pantheon", "Rome"),
    ("The Trevi Fountain", "Rome"), ("The Vatican Museum", "Rome"), ("Big Ben", "London"),
    ("The Tower of London", "London"), ("Buckingham Palace", "London"), ("The British Museum", "London"),
    ("The Brandenburg Gate", "Berlin"), ("The Reichstag building", "Berlin"),
    ("The Berlin Wall Memorial", "Berlin"), ("The Kremlin", "Moscow"), ("Red Square", "Moscow"),
    ("The Bolshoi Theatre", "Moscow"), ("The Sagrada Familia", "Barcelona"), ("Park Guell", "Barcelona"),
    ("The Prado Museum", "Madrid"), ("The Royal Palace of Madrid", "Madrid"),
    ("The Statue of Liberty", "New York"), ("Central Park", "New York"),
    ("The Empire State Building", "New York"), ("Times Square", "New York"),
    ("The Golden Gate Bridge", "San Francisco"), ("The Space Needle", "Seattle"),
    ("The Sydney Opera House", "Sydney"), ("The Forbidden City", "Beijing"),
    ("Tiananmen Square", "Beijing"), ("The Tokyo Tower", "Tokyo"), ("The Meiji Shrine", "Tokyo"),
    ("The Acropolis", "Athens"), ("The Parthenon", "Athens"), ("The Great Pyramid of Giza", "Cairo"),
    ("The Egyptian Museum", "Cairo"), ("The Rijksmuseum", "Amsterdam"), ("The Anne Frank House", "Amsterdam"),
    ("The Blue Mosque", "Istanbul"), ("The Hagia Sophia", "Istanbul"), ("The Charles Bridge", "Prague"),
    ("Prague Castle", "Prague"), ("St. Stephen's Cathedral", "Vienna"), ("Schonbrunn Palace", "Vienna"),
    ("The CN Tower", "Toronto"), ("Christ the Redeemer", "Rio"), ("The Taj Mahal", "Agra"),
    ("The Burj Khalifa", "Dubai"), ("The Little Mermaid statue", "Copenhagen"),
    ("The Atomium", "Brussels"), ("Edinburgh Castle", "Edinburgh"), ("The Hermitage Museum", "Saint Petersburg"),
    ("The Alhambra", "Granada"), ("The Leaning Tower", "Pisa"), ("The Rialto Bridge", "Venice"),
    ("St. Mark's Basilica", "Venice"), ("The Duomo of Florence", "Florence"), ("The Uffizi Gallery", "Florence"),
)  # fmt: skip
CAPITAL_TEMPLATES = (
    "[X] is located in the city of",
    "[X] can be found in the city of",
    "[X] is a famous sight in the city of",
)


def capitals(tokenizer: Any, n: int, seed: int = 0) -> list[Example]:
    """Up to ``n`` factual-recall examples drawn with ``seed`` from every (template, landmark, other landmark)
    whose texts have the same token length, whose cities differ and are each one token (leading space
    included): answer = the landmark's city, wrong = the other landmark's city. Fewer when fewer exist."""
    cities = {c for _, c in LANDMARKS if single_token(tokenizer, " " + c) is not None}
    usable = [(x, c) for x, c in LANDMARKS if c in cities]
    combos = []
    for t in CAPITAL_TEMPLATES:
        lengths = {x: len(_ids(tokenizer, t.replace("[X]", x))) for x, _ in usable}
        for x, c in usable:
            for y, d in usable:
                if c != d and lengths[x] == lengths[y]:
                    combos.append((t, x, c, y, d))
    rng = random.Random(seed)
    rng.shuffle(combos)
    out = [
        Example(t.replace("[X]", x), t.replace("[X]", y), " " + c, " " + d)
        for t, x, c, y, d in combos[:n]
    ]
    return [ex for ex in out if check_example(tokenizer, ex) is None]


def builtin(name: str, tokenizer: Any, n: int, seed: int = 0) -> list[Example]:
    if name == "ioi":
        return ioi(tokenizer, n, seed)
    if name == "capitals":
        return capitals(tokenizer, n, seed)
    raise HeadscopeError(f"unknown task {name!r}: the built-in tasks are {', '.join(TASKS)}")


# ---------------------------------------------------------------- uploads


def examples_of(rows: list[dict[str, Any]], tokenizer: Any, *, name: str) -> list[Example]:
    """Examples from checked rows (``workers.inputs.task_sets.read_rows``), each checked with the model's
    tokenizer (``check_example``): the first that fails refuses the set, its line named."""
    out = []
    for row in rows:
        ex = Example(**{k: row[k] for k in FIELDS}, line=row.get("line"))
        why = check_example(tokenizer, ex)
        if why is not None:
            where = f"line {ex.line}" if ex.line is not None else f"example {len(out) + 1}"
            raise BadFileError(f"{name}, {where}: {why}")
        out.append(ex)
    return out


def parse_jsonl(
    data: str | bytes,
    tokenizer: Any,
    *,
    fields: dict[str, str] | None = None,
    name: str = "dataset",
) -> list[Example]:
    """The examples of a JSON Lines upload, one object per line with the texts under ``fields``
    (``{"clean": "clean", ...}`` by default; MIB's files: name their fields). Blank lines are skipped.
    The first bad line refuses the whole file, the line named (BadFileError): nothing is kept."""
    return examples_of(read_rows(data, fields=fields, name=name), tokenizer, name=name)
