"""The Hugging Face hub, asked locally: the token that would be sent, what is cached, offline mode, and a
message for a person when a load failed for a hub reason. Nothing here touches the network."""

from __future__ import annotations

import os

from huggingface_hub import constants, get_token, try_to_load_from_cache
from huggingface_hub.errors import (
    GatedRepoError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)


def hub_token() -> str | None:
    """The Hugging Face token huggingface_hub would send (HF_TOKEN, or the saved login). Never printed."""
    try:
        return get_token()
    except Exception:  # noqa: BLE001  an OIDC exchange that failed, an unreadable token file: as if none were set
        return os.environ.get("HF_TOKEN") or None


def is_cached(repo_id: str) -> bool:
    """Whether a hub model's config is already in the local Hugging Face cache (no network)."""
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001  a local question about the hub: any failure means 'no'
        return False


def hub_cache_dir() -> str:
    try:
        return str(constants.HF_HUB_CACHE)
    except Exception:  # noqa: BLE001  a local question about the hub: any failure means 'no'
        return "the Hugging Face cache"


def gated_message(repo_id: str, token_set: bool) -> str:
    why = (
        "the token set (HF_TOKEN or a saved login) has no access to it" if token_set else "no Hugging Face token is set"
    )
    return (
        f"{repo_id!r} is a gated model and {why}: ask for access at https://huggingface.co/{repo_id}, then set "
        f"HF_TOKEN to a token with read access (docker run -e HF_TOKEN ...)"
    )


def offline() -> bool:
    try:
        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # noqa: BLE001  a local question about the hub: any failure means 'no'
        return False


def hub_problem(repo_id: str, error: BaseException) -> str | None:
    """A message for a person when loading a hub model failed for a hub reason (gated, missing, offline)."""
    chain, e = [], error
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(c, GatedRepoError) for c in chain) or "gated repo" in str(error).lower():
        return gated_message(repo_id, token_set=hub_token() is not None)
    if any(isinstance(c, RepositoryNotFoundError) for c in chain):
        return (
            f"there is no model {repo_id!r} on the Hugging Face hub (or it is private, and the token set, if "
            f"any, has no access to it)"
        )
    if any(isinstance(c, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for c in chain):
        return (
            f"{repo_id!r} is not in the local Hugging Face cache ({hub_cache_dir()}) and the hub cannot be "
            f"reached: run once with network access (it downloads into that cache), or use a named pair that "
            f"needs no download (embedded)"
        )
    return None
