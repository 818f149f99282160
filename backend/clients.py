"""Who is asking: a client's network address (rate limits) and its owner key (what it uploaded).

The address is the TCP peer, or the first ``X-Forwarded-For`` hop when the peer is a trusted proxy
(``HEADSCOPE_TRUSTED_PROXIES``; by default loopback, which is where the dashboard's server-side
callbacks come from — they forward the browser's address). The owner key comes from the
``X-Headscope-Client`` header, a random id the dashboard keeps in a cookie per browser (16-64
URL-safe characters; only its hash is stored), or else from the address.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

CLIENT_HEADER = "X-Headscope-Client"
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


@dataclass(frozen=True)
class Client:
    address: str  # rate limits count per address
    owner: str  # uploads are listed to their owner only


def client_of(request: Request) -> Client:
    settings = request.app.state.settings
    peer = request.client.host if request.client else "unknown"
    address = peer
    forwarded = request.headers.get("x-forwarded-for")
    if forwarded and peer in settings.trusted_proxies:
        first = forwarded.split(",")[0].strip()
        if first and len(first) <= 64:
            address = first
    given = request.headers.get(CLIENT_HEADER.lower(), "")
    if CLIENT_ID.fullmatch(given):
        owner = "c-" + hashlib.sha256(given.encode()).hexdigest()[:24]
    else:
        owner = "a-" + hashlib.sha256(address.encode()).hexdigest()[:24]
    return Client(address=address, owner=owner)


ClientDep = Annotated[Client, Depends(client_of)]
