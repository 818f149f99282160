"""Corpora streamed through the analysis (issue 33, docs/scaling.md "Streamed corpora"): a corpus read
window by window from a ``TextSource`` gives the statistics of the whole list at once (float64), the
analysis asks the source for one window at a time and never for the whole corpus, and a corpus job
on a stored corpus reads it through the store's batch reader, never its full-list reader."""

from __future__ import annotations

import numpy as np
import pytest

from workers.analyses.corpus.run import CorpusOptions, corpus_statistics
from workers.analyses.corpus.statistics import STATISTICS
from workers.inputs.texts import ListSource, as_source
from workers.models import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WORDS = "the cat sat on a mat while red green blue birds sang one two three songs".split()
TEXTS = [
    " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 9)) + f" {i}."
    for i in range(23)
]


class RecordingSource(ListSource):
    """A ``TextSource`` that records every range asked of it."""

    def __init__(self, texts):
        super().__init__(texts)
        self.asked: list[tuple[int, int | None, int]] = []

    def batches(self, start=0, stop=None, *, batch=1000):
        self.asked.append((start, stop, batch))
        yield from super().batches(start, stop, batch=batch)


def test_text_sources_hand_out_ranges_in_order():
    src = as_source(TEXTS)
    assert len(src) == 23 and [len(b) for b in src.batches(3, 20, batch=5)] == [5, 5, 5, 2]
    assert [t for b in src.batches(20, 99, batch=2) for t in b] == TEXTS[20:]
    assert as_source(src) is src and as_source(iter(TEXTS)).texts == TEXTS


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_windows_give_the_statistics_of_the_whole_corpus(catalogue, name):
    loaded = load_model(name, device="cpu", dtype="float64")
    opts = CorpusOptions(max_batch=4, top_k=5)
    whole = corpus_statistics(loaded, TEXTS, options=opts)
    source = RecordingSource(TEXTS)
    streamed = corpus_statistics(loaded, source, options=opts, window=5)
    assert [(a, s) for a, s, _ in source.asked] == [
        (i, min(i + 5, 23)) for i in range(0, 23, 5)
    ]  # a window a time
    for stat in STATISTICS:
        np.testing.assert_allclose(
            np.array(streamed["statistics"][stat], dtype=float),
            np.array(whole["statistics"][stat], dtype=float),
            rtol=1e-12,
            atol=1e-13,
        )
        assert streamed["counts"][stat] == whole["counts"][stat]
        assert streamed["histograms"][stat]["counts"] == whole["histograms"][stat]["counts"]
    assert (
        streamed["n_texts"] == whole["n_texts"] == 23 and streamed["n_tokens"] == whole["n_tokens"]
    )
    for layer_s, layer_w in zip(streamed["top_pairs"], whole["top_pairs"], strict=True):
        for got, want in zip(layer_s, layer_w, strict=True):
            assert [{k: v for k, v in p.items() if k != "weight"} for p in got] == [
                {k: v for k, v in p.items() if k != "weight"} for p in want
            ]  # the places and contexts
            np.testing.assert_allclose(
                [p["weight"] for p in got], [p["weight"] for p in want], rtol=1e-12
            )
    top = streamed["top_pairs"][1][0][0]
    assert top["tokens"][top["q_at"]] == top["query_token"] and top["text"] >= 0


def test_the_corpus_job_reads_a_stored_corpus_in_batches(
    catalogue, redis_server, tmp_path, monkeypatch
):
    from fastapi.testclient import TestClient
    from redis import Redis
    from rq import SimpleWorker

    import workers.queue.reporter
    from backend.app import create_app
    from backend.config import Settings
    from workers.queue import keys as protocol

    conn = Redis.from_url(redis_server)
    conn.flushdb()
    app = create_app(
        Settings(data_dir=tmp_path / "data", redis_url=redis_server),
        redis=conn,
        background=False,
        frontend=False,
    )
    store = app.state.store
    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    client = TestClient(app)
    texts = [f"{TEXTS[i % 23]} {i}" for i in range(1234)]
    cid = client.post(
        "/api/corpora", files={"file": ("many.txt", "\n".join(texts).encode(), "text/plain")}
    ).json()["id"]
    asked: list[tuple[int, int | None]] = []
    real = store.iter_corpus_texts

    def spy(corpus, start=0, stop=None, *, batch=1000):
        asked.append((start, stop))
        return real(corpus, start, stop, batch=batch)

    def whole(corpus):
        raise AssertionError("the corpus job read the whole corpus at once")

    monkeypatch.setattr(store, "iter_corpus_texts", spy)
    monkeypatch.setattr(store, "corpus_texts", whole)
    job = client.post(
        "/api/corpus-analyses",
        json={"corpus": cid, "model": "tiny-bert", "options": {"max_tokens": 16}},
    ).json()["id"]
    SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    ).work(burst=True)
    done = client.get(f"/api/corpus-analyses/{job}").json()
    assert done["status"] == "finished", done.get("error")
    assert done["result"]["n_texts"] == 1234
    assert asked == [(0, 500), (500, 1000), (1000, 1234)]  # one window (of 500 texts) at a time


@pytest.mark.parametrize("max_points", [10_000, 30])
def test_the_joint_map_streams_windows_and_samples_as_from_one_list(catalogue, max_points):
    from workers.analyses.corpus.joint_map import head_vectors

    loaded = load_model("tiny-llama", device="cpu")
    whole, w_tokens, w_context = head_vectors(loaded, TEXTS, layer=1, head=2, max_points=max_points)
    source = RecordingSource(TEXTS)
    part, p_tokens, p_context = head_vectors(
        loaded, source, layer=1, head=2, max_points=max_points, window=5
    )
    assert all(
        stop is not None and stop - start <= 5 for start, stop, _ in source.asked
    )  # never the whole corpus
    assert part.total == whole.total and (len(part.q) < whole.total) == (
        max_points < 2 * whole.total
    )
    ow, op = np.lexsort((whole.position, whole.text)), np.lexsort((part.position, part.text))
    assert (
        part.text[op].tolist() == whole.text[ow].tolist()
        and part.position[op].tolist() == whole.position[ow].tolist()
    )
    np.testing.assert_allclose(part.q[op], whole.q[ow], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(part.k[op], whole.k[ow], rtol=1e-5, atol=1e-6)
    assert [p_tokens[i] for i in op] == [w_tokens[i] for i in ow] and [
        p_context[i] for i in op
    ] == [w_context[i] for i in ow]
