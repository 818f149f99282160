"""Helpers the routers share: JSON responses assembled around stored raw result JSON."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import Response

from workers.core.errors import NotFoundError
from workers.core.jsonable import dumps


def raw_json(parts: dict[str, Any], raw: dict[str, str], *, status_code: int = 200) -> Response:
    """A JSON object of ``parts`` (serialised here) and ``raw`` (already JSON text, spliced in).

    Stored results are megabytes; splicing them avoids parsing and re-serialising on every read.
    """
    items = [f"{json.dumps(k)}:{dumps(v)}" for k, v in parts.items()]
    items += [f"{json.dumps(k)}:{v}" for k, v in raw.items()]
    return Response(
        "{" + ",".join(items) + "}", status_code=status_code, media_type="application/json"
    )


def not_found(what: str, ident: str) -> NotFoundError:
    return NotFoundError.of(what, ident)
