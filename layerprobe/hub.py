"""Is the Hugging Face hub there? Answered in seconds, before any hub call: the hub libraries retry an unreachable
host five times (about 30 s) before they give up, so a typo or a missing network is named first."""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlparse

TIMEOUT = 3.0  # seconds for one TCP connect to the hub's host; a reachable hub answers in well under a second


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE / TRANSFORMERS_OFFLINE) says the hub is not to be asked."""
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_host() -> tuple[str, int]:
    """The hub's host and port (HF_ENDPOINT, default https://huggingface.co)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def hub_problem() -> str | None:
    """Why the hub cannot be asked ('offline here (HF_HUB_OFFLINE)', 'huggingface.co unreachable: ...'), or None
    when it can: one DNS lookup and one TCP connect, at most TIMEOUT seconds, asked once per process."""
    if hub_offline():
        return "the hub is offline here (HF_HUB_OFFLINE)"
    return _unreachable(*hub_host(), _proxied())


def _proxied() -> bool:
    return any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))


@functools.cache
def _unreachable(host: str, port: int, proxied: bool) -> str | None:
    if proxied:
        return None  # behind a proxy a direct connect says nothing: let the hub library try
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT):
            return None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return f"the hub ({host}) is unreachable from here ({reason})"
