"""Task data sets for circuits on a set (docs/circuits.md, SPEC 14): the built-in ioi and capitals are
determined by their seed and give clean/corrupted texts of the same token length on the tiny decoders'
tokenizer and on SmolLM2's; a JSON Lines upload is refused at its first bad line, the line named."""

from __future__ import annotations

import json

import pytest
from tiny_models import _decoder_tokenizer

from workers.analyses.circuits import tasks
from workers.core.errors import BadFileError, HeadscopeError

TINY_NAMES = ["the", "of", "and", "is", "in", "a"]  # the tiny BPE has no one-token first names


@pytest.fixture(scope="module")
def tiny():
    return _decoder_tokenizer(64)


def _length(tok, text):
    return len(tok(text)["input_ids"])


def test_ioi_is_seeded_and_same_length_on_the_tiny_tokenizer(tiny):
    a = tasks.ioi(tiny, 30, seed=1, names=TINY_NAMES)
    assert a == tasks.ioi(tiny, 30, seed=1, names=TINY_NAMES)
    assert a != tasks.ioi(tiny, 30, seed=2, names=TINY_NAMES)
    for ex in a:
        assert _length(tiny, ex.clean) == _length(tiny, ex.corrupted)
        assert tasks.check_example(tiny, ex) is None
    with pytest.raises(HeadscopeError, match="at least 4 names"):
        tasks.ioi(tiny, 5)  # the default names are several tokens each on the tiny BPE


def test_builtin_tasks_on_smollm2(smollm2):
    tok = smollm2.tokenizer
    ioi = tasks.builtin("ioi", tok, 200, seed=0)
    assert ioi == tasks.builtin("ioi", tok, 200, seed=0) != tasks.builtin("ioi", tok, 200, seed=3)
    assert len(ioi) == 200 and len({ex.clean for ex in ioi}) > 150
    assert (
        len({ex.answer for ex in ioi}) > 30
        and len({t for ex in ioi for t in (ex.clean.split()[0],)}) > 3
    )
    cap = tasks.builtin("capitals", tok, 300, seed=0)
    assert len(cap) == 300 and cap == tasks.builtin("capitals", tok, 300, seed=0)
    assert len({ex.answer for ex in cap}) > 10
    for ex in ioi + cap:
        assert _length(tok, ex.clean) == _length(tok, ex.corrupted)
        assert len(tok(ex.answer, add_special_tokens=False)["input_ids"]) == 1
        assert ex.answer != ex.wrong
    for ex in ioi:  # the indirect object is the answer: named once, the subject twice
        assert ex.clean.count(ex.answer + " ") + ex.clean.count(ex.answer + ",") == 1
        assert ex.clean.count(ex.wrong) == 2
        assert (
            ex.answer not in ex.corrupted and ex.wrong not in ex.corrupted
        )  # another pair's names
    with pytest.raises(HeadscopeError, match="unknown task"):
        tasks.builtin("sva", tok, 5)


def _lines(rows):
    return "\n".join(json.dumps(r) if isinstance(r, dict) else r for r in rows)


def test_jsonl_uploads(tiny):
    good = {
        "clean": "the model is in the text",
        "corrupted": "the model is of the text",
        "answer": " is",
        "wrong": " of",
    }
    got = tasks.parse_jsonl(_lines([good, "", good]), tiny)
    assert [ex.line for ex in got] == [1, 3] and got[0].answer == " is"
    # field names settable (MIB's files name them their own way)
    mib = {"prompt": good["clean"], "cf": good["corrupted"], "a": " is", "b": " of"}
    fields = {"clean": "prompt", "corrupted": "cf", "answer": "a", "wrong": "b"}
    assert tasks.parse_jsonl(_lines([mib]), tiny, fields=fields)[0].clean == good["clean"]
    bad = [
        ("not json {", "line 2: not JSON"),
        ("[1, 2]", "line 2: a JSON object"),
        ({**good, "answer": 3}, "line 2: 'answer' must be a non-empty string"),
        ({k: v for k, v in good.items() if k != "wrong"}, "line 2: no field 'wrong'"),
        (
            {**good, "corrupted": "the model is of the text and a head"},
            "line 2: the clean text has",
        ),
        ({**good, "answer": " model head"}, "line 2: ' model head' is not one token"),
        ({**good, "wrong": " is"}, "line 2: the answer and the wrong token are the same"),
    ]
    for row, why in bad:
        with pytest.raises(BadFileError, match=why):
            tasks.parse_jsonl(_lines([good, row, good]), tiny, name="set.jsonl")
    with pytest.raises(BadFileError, match="no examples"):
        tasks.parse_jsonl("\n\n", tiny)
    with pytest.raises(BadFileError, match="not UTF-8"):
        tasks.parse_jsonl(b"\xff\xfe", tiny)
