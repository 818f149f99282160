"""One notation for heads, target tokens and tokens (workers/core/notation.py): the dashboard, the
figures, the exports and the CLI read and write the same thing."""

from __future__ import annotations

import shlex

import pytest

from workers.core import notation as N


def test_heads_are_written_L1H9_and_read_in_both_notations():
    assert N.head_label(1, 9) == "L1H9" and N.head_label(15, 4) == "L15H4"
    for typed in ("L1H9", "l1h9", " L1 H9 ", "1.9", [1, 9], (1, 9)):
        assert N.parse_head(typed) == (1, 9), typed
    for bad in ("x", None, "L2H", "-1.2", "L2H5x", "2.5.1", True, [1], "1,9"):
        assert N.parse_head(bad) is None, bad
    assert N.parse_heads("L3H1, L5H0 7.2") == [[3, 1], [5, 0], [7, 2]]
    with pytest.raises(ValueError, match="'L3' is not a head"):
        N.parse_heads("L3,L5H0")


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ('" Mary" " John"', [" Mary", " John"]),
        ('" Paris"', " Paris"),
        ("#123", 123),
        ('#5 " Rome"', [5, " Rome"]),
        ("Paris", "Paris"),
        ("'\"'", '"'),
    ],
)
def test_a_target_typed_in_the_box_is_what_the_cli_reads_from_the_same_shell_words(line, want):
    """The box takes what one types after --target on a shell line; the CLI gets the shell's words."""
    from backend.cli import build_parser
    from backend.cli.analyze import given_options

    assert N.parse_target(line) == want
    assert N.target_words(shlex.split(line)) == want
    args = build_parser().parse_args(
        ["analyze", "--analysis", "ablation", "--target", *shlex.split(line)]
    )
    assert given_options(args)["target"] == want
    assert N.parse_target(N.format_target(want)) == want  # the box shows a request's target back


def test_older_dashboard_links_and_markers_still_read():
    assert N.parse_target("␣Mary|␣John") == [" Mary", " John"]
    assert N.parse_target(" Paris| Rome") == [" Paris", " Rome"]
    assert N.parse_target(" Paris") == " Paris"  # a leading space typed as it is
    assert (
        N.parse_target("⏎") == "\n" and N.parse_target("") is None and N.parse_target("  ") is None
    )
    with pytest.raises(ValueError, match="one token or a pair"):
        N.parse_target('"a" "b" "c"')
    with pytest.raises(ValueError, match="quote is not closed"):
        N.parse_target('" Paris')
    assert N.format_target(None) == "" and N.format_target([" Paris", 12]) == '" Paris" #12'


def test_tokens_show_one_way_whatever_the_tokenizer_wrote():
    # GPT-2 / SmolLM2 byte-level pieces, SentencePiece, WordPiece, added tokens, decoded texts
    assert N.display_token("Ġtook") == "␣took" == N.display_text(" took")
    assert N.display_token("âĢĻ") == "’" and N.display_token("ĊĊ") == "⏎⏎"
    assert N.display_token("▁took") == "␣took"
    assert N.display_token("##ing") == "##ing" and N.display_token("[CLS]") == "[CLS]"
    assert N.display_token("café") == "café"  # not byte-level: left as it is
    assert N.token_label("Ġcat", " cat") == "␣cat" and N.token_label("<s>", "") == "<s>"
    assert N.display_text("") == "∅"


def test_the_corpus_pairs_and_every_figure_show_tokens_through_it():
    from frontend.figures.corpus import context_parts
    from frontend.figures.tokens import readable_tokens

    pair = {"tokens": ["It", "Ġtook", "Ġthem", "…", "Ċ"], "q_at": 2, "k_at": 0}
    assert context_parts(pair) == [
        ("It", "key"),
        ("␣took", ""),
        ("␣them", "query"),
        ("…", ""),
        ("⏎", ""),
    ]
    result = {"tokens": ["<s>", "Ġcat", "Ġ<b>"], "token_texts": ["", " cat", ""]}
    assert readable_tokens(result, markup=False) == ["<s>", "␣cat", "␣<b>"]
    assert readable_tokens(result) == ["&lt;s&gt;", "␣cat", "␣&lt;b&gt;"]
