"""The only module of the frontend that talks HTTP: a thin client of the API in docs/api.md.

Every method returns the decoded JSON body; a 4xx/5xx or an unreachable server raises ``ApiError``
whose message is the server's ``detail`` (already written for users) or a plain description.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """A request the backend refused or could not answer; ``str(err)`` is fit to show users."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


def _detail(response: httpx.Response) -> str:
    """The user-facing reason of an error response (FastAPI's ``detail``, possibly a list)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # pydantic validation errors
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(x) for x in item.get("loc", []) if x != "body")
                parts.append(
                    f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", ""))
                )
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


CLIENT_COOKIE = "hs_client"  # a random id per browser, set by frontend/app.py


def browser_headers() -> dict[str, str]:
    """Inside a dashboard callback: the browser's client id (cookie) and address, so the API
    lists a browser's own uploads and rate-limits per browser (backend/clients.py)."""
    try:
        from flask import has_request_context, request
    except ImportError:
        return {}
    if not has_request_context():
        return {}
    headers = {}
    if request.cookies.get(CLIENT_COOKIE):
        headers["X-Headscope-Client"] = request.cookies[CLIENT_COOKIE][:64]
    if request.remote_addr:
        headers["X-Forwarded-For"] = request.remote_addr
    return headers


class ApiClient:
    """Synchronous client of the headscope API rooted at ``base_url`` (e.g. ``http://127.0.0.1:8050``)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        token: str | None = None,
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=headers
        )

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, headers=browser_headers(), **kwargs)
        except httpx.HTTPError as exc:
            logger.warning("%s %s failed: %s", method, path, exc)
            raise ApiError(f"the analysis service is not reachable ({type(exc).__name__})") from exc
        if response.status_code >= 400:
            raise ApiError(_detail(response), status=response.status_code)
        return orjson.loads(
            response.content
        )  # faster than json on a running gallery's megabytes of floats (docs/dashboard.md)

    # ------------------------------------------------------------------ health and models
    def health(self) -> dict[str, Any]:
        return self._request("GET", "/api/health")

    def models(self) -> dict[str, Any]:
        """``{"default": name, "models": [{"name", "description", "n_layers", "n_heads", ...}]}``."""
        return self._request("GET", "/api/models")

    # ------------------------------------------------------------------ text analyses
    def submit_analysis(
        self, *, model: str, text: str, analyses: list[str], options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``POST /api/analyses`` → ``{"id", "status"}`` (identical requests share one id)."""
        body = {"model": model, "text": text, "analyses": analyses, "options": options or {}}
        return self._request("POST", "/api/analyses", json=body)

    def cancel_analysis(self, analysis_id: str) -> dict[str, Any]:
        """``DELETE /api/analyses/{id}`` → ``{"id", "status", "cancelled"}``."""
        return self._request("DELETE", f"/api/analyses/{analysis_id}")

    def analysis(
        self,
        analysis_id: str,
        *,
        partial: str | None = None,
        result: str | None = None,
        sections: str | None = None,
    ) -> dict[str, Any]:
        """``GET /api/analyses/{id}`` → JobStatus (``status``, ``progress``, ``partial``, ``partial_keys``,
        ``result``, …); ``partial``: which partial keys to send (``"none"``, ``"a,b"``; default all);
        ``result="none"``: no result even when finished; ``sections``: of a finished result only the
        small keys and these sections (``"a,b"``, ``""``: none), ``sections`` naming all it holds."""
        params = {
            k: v
            for k, v in (("partial", partial), ("result", result), ("sections", sections))
            if v is not None
        } or None
        return self._request("GET", f"/api/analyses/{analysis_id}", params=params)

    # ------------------------------------------------------------------ positional encodings
    def upload_checkpoint(self, filename: str, data: bytes) -> dict[str, Any]:
        """``POST /api/checkpoints`` (multipart field ``file``) → id, candidates, default tensor."""
        files = {"file": (filename, data, "application/octet-stream")}
        return self._request("POST", "/api/checkpoints", files=files)

    def checkpoint(self, checkpoint_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/checkpoints/{checkpoint_id}")

    def checkpoints(self) -> dict[str, Any]:
        """``{"checkpoints": [...], "demos": [...]}``; demo ids start with ``demo-``."""
        return self._request("GET", "/api/checkpoints")

    def submit_pe_analysis(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/pe-analyses", json=body)

    def pe_analysis(self, analysis_id: str, *, partial: str | None = None) -> dict[str, Any]:
        params = {"partial": partial} if partial is not None else None
        return self._request("GET", f"/api/pe-analyses/{analysis_id}", params=params)

    # ------------------------------------------------------------------ corpora (docs/corpus.md)
    def upload_corpus(
        self,
        *,
        filename: str | None = None,
        data: bytes | None = None,
        text: str | None = None,
        field: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/corpora``: a file (``filename`` + ``data``) or pasted ``text`` → id, name, n_texts."""
        form = {k: v for k, v in {"text": text, "field": field, "name": name}.items() if v}
        files = (
            {"file": (filename or "corpus.txt", data or b"", "application/octet-stream")}
            if data is not None
            else None
        )
        if files is None and "text" not in form:
            form["text"] = ""
        return self._request("POST", "/api/corpora", data=form, files=files)

    def upload_task_set(
        self,
        *,
        filename: str | None = None,
        data: bytes | None = None,
        text: str | None = None,
        fields: dict[str, str] | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/task-sets`` (docs/circuits.md): a JSON Lines file or pasted text, the file's field
        names for clean, corrupted, answer, wrong → id, name, n_examples."""
        form = {"text": text, "name": name, **(fields or {})}
        form = {k: v for k, v in form.items() if v is not None}
        files = (
            {"file": (filename or "set.jsonl", data, "application/octet-stream")}
            if data is not None
            else None
        )
        return self._request("POST", "/api/task-sets", data=form, files=files)

    def corpora(self) -> dict[str, Any]:
        """``{"corpora": [...], "shipped": [...]}``; shipped ids start with ``builtin-``."""
        return self._request("GET", "/api/corpora")

    def submit_corpus(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/corpus-analyses", json=body)

    def corpus_analysis(self, job_id: str, *, partial: str | None = None) -> dict[str, Any]:
        params = {"partial": partial} if partial is not None else None
        return self._request("GET", f"/api/corpus-analyses/{job_id}", params=params)

    def cancel_corpus(self, job_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/api/corpus-analyses/{job_id}")

    def submit_joint(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/corpus-joint", json=body)

    def corpus_joint(self, job_id: str, *, partial: str | None = None) -> dict[str, Any]:
        params = {"partial": partial} if partial is not None else None
        return self._request("GET", f"/api/corpus-joint/{job_id}", params=params)

    # ------------------------------------------------------------------ comparisons (docs/compare.md)
    def submit_compare(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/compare", json=body)

    def compare(self, job_id: str, *, partial: str | None = None) -> dict[str, Any]:
        params = {"partial": partial} if partial is not None else None
        return self._request("GET", f"/api/compare/{job_id}", params=params)

    def cancel_compare(self, job_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/api/compare/{job_id}")

    # ------------------------------------------------------------------ share links
    def create_share(
        self,
        *,
        view: dict[str, Any],
        analysis_id: str | None = None,
        pe_analysis_id: str | None = None,
        corpus_analysis_id: str | None = None,
        compare_id: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/shares`` → ``{"id", "url"}``; the view is stored as given."""
        ids = {
            "analysis_id": analysis_id,
            "pe_analysis_id": pe_analysis_id,
            "corpus_analysis_id": corpus_analysis_id,
            "compare_id": compare_id,
        }
        given = {k: v for k, v in ids.items() if v is not None}
        if len(given) != 1:
            raise ValueError("give exactly one of analysis_id and pe_analysis_id")
        return self._request("POST", "/api/shares", json={"view": view, **given})

    def share(
        self, share_id: str, *, result: str | None = None, sections: str | None = None
    ) -> dict[str, Any]:
        """``GET /api/shares/{id}`` → ``{"id", "kind", "view", "request", "result"}`` (never recomputes);
        ``result="none"``: without the result; ``sections``: as ``analysis``."""
        params = {
            k: v for k, v in (("result", result), ("sections", sections)) if v is not None
        } or None
        return self._request("GET", f"/api/shares/{share_id}", params=params)
