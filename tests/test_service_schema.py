"""schemathesis against a live ``headscope serve``: every response matches ``/openapi.json``.

A serve with no workers (jobs stay queued: generated requests cost no compute) and no rate limit,
on loopback. A few hundred generated requests, valid and invalid, over every operation; the test
fails on any 5xx, any response whose status, content type or body the document does not declare.
"""

from __future__ import annotations

import pytest
from service_helpers import ServeProcess

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.slow
EXAMPLES = 40  # per operation
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def bare_service(tmp_path_factory, tiny_model_dirs):
    proc = ServeProcess.for_tests(tmp_path_factory.mktemp("schema"), tiny_model_dirs, workers=0)
    proc.start()
    yield proc
    assert proc.stop() == set()


def exercise(op, calls: dict[str, int]) -> None:
    """Up to ``EXAMPLES`` generated requests against one operation, every check applied."""

    @given(case=op.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        calls[op.label] = calls.get(op.label, 0) + 1
        case.call_and_validate(checks=CHECKS)

    run()


def test_api_matches_its_openapi_document(bare_service):
    schema = schemathesis.openapi.from_url(f"{bare_service.url}/openapi.json")
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        exercise(result.ok(), calls)
    print(
        f"schemathesis: {sum(calls.values())} requests over {len(calls)} operations, all conforming"
    )
    assert len(calls) >= 9 and sum(calls.values()) >= 200
