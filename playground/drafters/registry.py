"""Drafters by name: the menu the CLI and the browser offer, the default for a pair, and building one."""

from __future__ import annotations

import threading

from ..core.proposal import Proposer
from ..errors import PlaygroundError
from ..pairs.models import EMBEDDED_NAME
from .llamacpp import LlamaCppProposer, llama_cpp_available
from .proposers import DraftModelProposer, HybridProposer, PromptLookupProposer
from .suffix import SuffixHybridProposer, SuffixProposer

DRAFTERS = {
    "llama.cpp": "the target's own GGUF run by llama.cpp (embedded target only; needs llama-cpp-python)",
    "draft": "the pair's draft model (for the embedded target: an int8 copy of its weights)",
    "lookup": "prompt lookup: copy what followed the latest match of the last n tokens (no model)",
    "hybrid": "prompt lookup where the last tokens occurred before, else the best model drafter",
    "suffix": "suffix decoding: the longest match in a suffix tree over this run and earlier ones (no model)",
    "suffix-hybrid": "suffix decoding where its match is worth verifying, else the best model drafter",
}


def default_drafter(pair) -> tuple[str, str]:
    """The best drafter this pair can use here, and why: llama.cpp for the embedded target when it is
    installed (measured fastest on CPU), else the pair's draft model, else prompt lookup."""
    if pair.target_name == EMBEDDED_NAME:
        ok, why = llama_cpp_available()
        if ok:
            return "llama.cpp", "the embedded GGUF in llama.cpp"
        fallback = "draft" if pair.draft is not None else "lookup"
        return fallback, f"llama.cpp drafter unavailable ({why}); using {fallback}"
    if pair.draft is not None:
        return "draft", "the pair's draft model"
    return "lookup", "no draft model loaded"


def make_proposer(pair, drafter: str = "draft", max_ngram: int = 3, suffix_cache=None) -> Proposer:
    """A proposer of the named kind for this pair (see DRAFTERS). Each call builds a new proposer, except
    llama.cpp's, whose load costs about a second: it is built once per pair and shared (`shared_llama_cpp`).
    suffix_cache: the earlier responses the suffix drafters draw on (a SuffixCache per tab, lab arm or
    trace); None starts an empty one."""
    if drafter == "auto":
        drafter = default_drafter(pair)[0]
    if drafter in ("hybrid", "suffix-hybrid"):
        inner = default_drafter(pair)[0]
        if inner == "lookup":
            raise PlaygroundError(f"the {drafter} drafter needs a model drafter (llama.cpp or a draft model), "
                                  "and this pair has neither")
        model = make_proposer(pair, inner, max_ngram=max_ngram)
        if drafter == "suffix-hybrid":
            return SuffixHybridProposer(model, SuffixProposer(suffix_cache))
        return HybridProposer(model, max_ngram=max_ngram)
    if drafter == "suffix":
        return SuffixProposer(suffix_cache)
    if drafter == "draft":
        if pair.draft is None:
            raise PlaygroundError("this model pair has no draft model; choose the 'lookup' drafter or load a draft")
        return DraftModelProposer(pair.draft, pair.device, pair.vocab_size, name=pair.draft_name or "draft",
                                  copies_target=pair.draft_copies_target)
    if drafter == "lookup":
        return PromptLookupProposer(max_ngram=max_ngram)
    if drafter == "llama.cpp":
        return shared_llama_cpp(pair)
    raise PlaygroundError(f"unknown drafter {drafter!r}; choose one of auto, {', '.join(DRAFTERS)}")


_BUILD_LOCK = threading.Lock()  # two tabs asking at once build one drafter, not two


def shared_llama_cpp(pair) -> LlamaCppProposer:
    """The pair's llama.cpp drafter, built on first use and kept in `pair.llama_cpp`.

    It is shared by every run on the pair (every browser tab, every lab arm), and that is safe: runs on a
    device take its lock one at a time (playground.ui.serving.device_lock; the CLI and the lab run one at a
    time anyway), `begin` resets everything a run depends on, and what it keeps from the previous run (the
    llama.cpp KV of the prompt prefix the two runs share) changes only how long the next prefill takes.
    """
    if pair.target_name != EMBEDDED_NAME:
        raise PlaygroundError("the llama.cpp drafter runs the embedded GGUF, so it drafts for the embedded target only")
    with _BUILD_LOCK:
        if pair.llama_cpp is None:
            pair.llama_cpp = LlamaCppProposer(pair.tokenizer, vocab_size=pair.vocab_size,
                                              target_config=pair.target.config)
        return pair.llama_cpp
