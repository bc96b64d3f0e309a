"""Drafters by name: one declaration (`DrafterSpec`) per drafter, which every reader takes its drafters from.

The CLI, the browser, replay and the lab all read `drafters()` / `drafter_spec(name)`; none keeps a list of its
own. `make_proposer` builds one by name, "auto" picks the best this pair can run (`default_drafter`), and
`available_drafters` says which a pair can run.

Adding a drafter (a module with its proposer, one `register_drafter` call at the end of this module) is
docs/drafters.md's "Adding a drafter". Registration order is menu order and, for the drafters marked `auto`, the
order "auto" prefers them in.

This module imports nothing heavy (torch, transformers): the CLI builds its parser from it, and each drafter's
build imports its module when called.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PlaygroundError
from .spec import COSTS, DRAFT, HYBRID_WALK, LOOKUP, REPLAY_WALKS, SCHEMA, SUFFIX, DrafterSpec, PairFacts, Source

__all__ = ["COSTS", "DRAFT", "HYBRID_WALK", "LOOKUP", "REPLAY_WALKS", "SCHEMA", "SUFFIX", "DrafterSpec", "PairFacts", "Source"]

if TYPE_CHECKING:
    from ..core.proposal import Proposer

EXAMPLE_DRAFTER = "hybrid"
"""The drafter of the browser's opening example (playground.ui.session.SHOW_ME): it copies list items from the
prompt and its model drafter writes the rest, so every token role shows in one run of a few seconds."""


_SPECS: dict[str, DrafterSpec] = {}
_LOCK = threading.Lock()  # registration from a test or a plugin, while a tab reads the menu


def register_drafter(spec: DrafterSpec) -> DrafterSpec:
    """Declare a drafter (docs/drafters.md, "Adding a drafter"); its name must be new. Returns the spec."""
    if spec.name == "auto" or not spec.name:
        raise PlaygroundError(f"a drafter cannot be named {spec.name!r}")
    with _LOCK:
        if spec.name in _SPECS:
            raise PlaygroundError(f"a drafter named {spec.name!r} is already registered")
        _SPECS[spec.name] = spec
    return spec


def unregister_drafter(name: str) -> None:
    """Withdraw a drafter (tests register toy drafters and withdraw them)."""
    with _LOCK:
        _SPECS.pop(name, None)


def drafters() -> list[DrafterSpec]:
    """Every declared drafter, in registration order."""
    with _LOCK:
        return list(_SPECS.values())


def names() -> list[str]:
    """Every declared drafter's name, in registration order ("auto" is not one: it picks one of these)."""
    return [s.name for s in drafters()]


def drafter_spec(name: str) -> DrafterSpec:
    """The drafter named `name`; a PlaygroundError naming the choices otherwise."""
    with _LOCK:
        spec = _SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise PlaygroundError(f"unknown drafter {name!r}; choose one of auto, {', '.join(names())}")
    return spec


def available_drafters(pair) -> list[str]:
    """The drafters this pair can run here (optional packages checked), in registration order."""
    facts = PairFacts.of(pair)
    return [s.name for s in drafters() if s.available(facts)[0]]


def _known(name) -> DrafterSpec | None:
    """The drafter named `name`; None for "auto" or an unknown name."""
    with _LOCK:
        return _SPECS.get(name) if isinstance(name, str) else None


def sources() -> list[Source]:
    """Every source the registered drafters declare (the first declaration of each name), in registration order."""
    found: dict[str, Source] = {}
    for spec in drafters():
        for s in spec.sources:
            found.setdefault(s.name, s)
    return list(found.values())


def source(name: str) -> Source | None:
    """The source tagged `name` that a registered drafter declares (`sources`), or None."""
    return next((s for s in sources() if s.name == name), None)


def new_memory(name: str) -> Callable[[], object] | None:
    """The named drafter's memory factory (DrafterSpec.new_memory); None for "auto", an unknown name or a
    stateless drafter."""
    spec = _known(name)
    return spec.new_memory if spec is not None else None


def one_cost(name: str) -> bool:
    """Whether the named drafter's proposals all cost one drafter cost c (DrafterSpec.one_cost); for "auto",
    whether every drafter it may pick does; an unknown name: yes."""
    if name == "auto":
        return all(s.one_cost for s in drafters() if s.auto)
    spec = _known(name)
    return spec is None or spec.one_cost


def model_drafter(pair) -> str | None:
    """The first model drafter this pair can run here (what the hybrid wraps), or None."""
    facts = PairFacts.of(pair)
    return next((s.name for s in drafters() if s.model and s.available(facts)[0]), None)


def default_drafter(pair) -> tuple[str, str]:
    """What "auto" picks, and why: the first drafter marked `auto` this pair can run (llama.cpp for the embedded
    target when it is installed, measured fastest on CPU; else the pair's draft model; else prompt lookup)."""
    facts, skipped = PairFacts.of(pair), []
    for spec in drafters():
        if not spec.auto:
            continue
        ok, why = spec.available(facts)
        if ok:
            return spec.name, f"{'; '.join(skipped)}; using {spec.name}" if skipped else spec.description
        skipped.append(f"{spec.name} drafter unavailable ({why})")
    raise PlaygroundError("no drafter can run on this model pair")


def make_proposer(pair, drafter: str = "draft", max_ngram: int = 3, **options) -> Proposer:
    """A proposer of the named drafter (or "auto") for this pair. Each call builds a new proposer, except
    llama.cpp's, whose load costs about a second: it is built once per pair and shared
    (`shared_llama_cpp`)."""
    if drafter == "auto":
        drafter = default_drafter(pair)[0]
    spec = drafter_spec(drafter)
    ok, why = spec.available(PairFacts.of(pair, check_installs=False))  # a missing package: its build says how
    if not ok:
        raise PlaygroundError(why)
    return spec.build(pair, max_ngram=max_ngram, **options)


# --- the drafters that ship ------------------------------------------------------------------------------------
# Each build imports its drafter's module when called: they import torch (the module docstring says why not here).


_BUILD_LOCK = threading.Lock()  # two tabs asking at once build one drafter, not two


def shared_llama_cpp(pair, **_options) -> Proposer:
    """The pair's llama.cpp drafter, built on first use and kept in `pair.llama_cpp`.

    It is shared by every run on the pair, and that is safe: runs on a device take its lock one at a time,
    `begin` resets everything a run depends on, and what it keeps from the previous run (the llama.cpp KV of the
    prompt prefix the two runs share) changes only how long the next prefill takes."""
    from .llamacpp import LlamaCppProposer  # imports torch and numpy: on use (the module docstring)

    with _BUILD_LOCK:
        if pair.llama_cpp is None:
            pair.llama_cpp = LlamaCppProposer(pair.tokenizer, vocab_size=pair.vocab_size,
                                              target_config=pair.target.config)
        return pair.llama_cpp


def _llama_cpp_installed() -> tuple[bool, str]:
    from .llamacpp_runtime import llama_cpp_available  # imports torch: on use (the module docstring)

    return llama_cpp_available()


def _embedded_only(facts: PairFacts) -> str | None:
    if facts.embedded_target:
        return None
    return "the llama.cpp drafter runs the embedded GGUF, so it drafts for the embedded target only"


def _build_draft(pair, **_options) -> Proposer:
    from .proposers import DraftModelProposer  # imports torch: on use (the module docstring)

    return DraftModelProposer(pair.draft, pair.device, pair.vocab_size, name=pair.draft_name or "draft",
                              copies_target=pair.draft_copies_target)


def _draft_pass_exact(pair) -> bool:
    """The int8 copy on the lean forward: row-independent products, so its logits for a token do not depend on
    what was fed beside it (core.int8; bitwise in tests/test_int8.py)."""
    from ..core.int8 import row_independent  # imports torch: on use (the module docstring)
    from ..core.lean import supports  # imports torch: on use (the module docstring)

    return pair.draft is not None and supports(pair.draft) is None and row_independent(pair.draft)


def _build_lookup(pair, max_ngram: int = 3, **_options) -> Proposer:
    from .proposers import PromptLookupProposer  # imports torch: on use (the module docstring)

    return PromptLookupProposer(max_ngram=max_ngram)


_NO_MODEL_DRAFTER = "the hybrid drafter needs a model drafter (llama.cpp or a draft model), and this pair has neither"


def _needs_model_drafter(facts: PairFacts) -> str | None:
    return None if any(s.model and s.available(facts)[0] for s in drafters()) else _NO_MODEL_DRAFTER


def _build_hybrid(pair, max_ngram: int = 3, model: Proposer | None = None, **_options) -> Proposer:
    """Around `model` (replay's walk of the model drafter), else around a new proposer of the pair's model drafter."""
    from .proposers import HybridProposer  # imports torch: on use (the module docstring)

    if model is None:
        inner = model_drafter(pair)
        if inner is None:
            raise PlaygroundError(_NO_MODEL_DRAFTER)
        model = make_proposer(pair, inner, max_ngram=max_ngram)
    return HybridProposer(model, max_ngram=max_ngram)


register_drafter(DrafterSpec(
    "llama.cpp", "llama.cpp", "the target's own GGUF run by llama.cpp (embedded target only; needs llama-cpp-python)",
    shared_llama_cpp, replay="pass", requires=_embedded_only, installed=_llama_cpp_installed,
    pass_exact=lambda pair: True, auto=True))  # 72 of 72 walks equal (playground.lab.replay's docstring)
register_drafter(DrafterSpec(
    "draft", "draft model", "the pair's draft model (for the embedded target: an int8 copy of its weights)",
    _build_draft, replay="pass", draft_model=True, pass_exact=_draft_pass_exact, auto=True))
register_drafter(DrafterSpec(
    "lookup", "prompt lookup", "prompt lookup: copy what followed the latest match of the last n tokens (no model)",
    _build_lookup, auto=True))
register_drafter(DrafterSpec(
    "hybrid", "hybrid", "prompt lookup where the last tokens occurred before, else the best model drafter",
    _build_hybrid, replay="hybrid", requires=_needs_model_drafter, sources=(LOOKUP, DRAFT)))


def _suffix_installed() -> tuple[bool, str]:
    from .suffix_cache import suffix_tree_available  # imports the suffix tree's module lazily; kept with its kin

    return suffix_tree_available()


def _suffix_memory():
    from .suffix_cache import SuffixCache  # imports the suffix tree's module lazily; kept with its kin

    return SuffixCache()


def _build_suffix(pair, memory=None, **_options) -> Proposer:
    from .suffix import SuffixProposer  # imports torch: on use (the module docstring)

    return SuffixProposer(memory)


def _build_suffix_hybrid(pair, max_ngram: int = 3, model: Proposer | None = None, memory=None,
                         **_options) -> Proposer:
    """Around `model` (replay's walk of the model drafter), else around a new proposer of the pair's model drafter."""
    from .suffix import SuffixHybridProposer, SuffixProposer  # imports torch: on use (the module docstring)

    if model is None:
        inner = model_drafter(pair)
        if inner is None:
            raise PlaygroundError(_NO_MODEL_DRAFTER.replace("hybrid", "suffix-hybrid"))
        model = make_proposer(pair, inner, max_ngram=max_ngram)
    return SuffixHybridProposer(model, SuffixProposer(memory))


register_drafter(DrafterSpec(
    "suffix", "suffix decoding",
    "suffix decoding: the longest match in a suffix tree over this run and earlier ones (no model)",
    _build_suffix, installed=_suffix_installed, sources=(SUFFIX,), new_memory=_suffix_memory))
register_drafter(DrafterSpec(
    "suffix-hybrid", "suffix hybrid",
    "suffix decoding where its match is worth verifying, else the best model drafter",
    _build_suffix_hybrid, replay="hybrid", requires=_needs_model_drafter, installed=_suffix_installed,
    sources=(SUFFIX, DRAFT), new_memory=_suffix_memory))


def _schema_spec(inner: str, label: str, help_: str, source: str, sources: tuple, **more) -> DrafterSpec:
    """schema+`inner`: the schema's forced tokens, then a new proposer of `inner` (its tokens tagged `source`), built
    with the same options."""

    def build(pair, **options) -> Proposer:
        from .schema import SchemaProposer  # imports torch: on use (the module docstring)

        return SchemaProposer(make_proposer(pair, inner, **options), source)

    return DrafterSpec(f"schema+{inner}", label, _FORCED + help_, build, sources=(SCHEMA, *sources), schema=True,
                       inner=inner, **more)


def schema_variant(name: str) -> str | None:
    """The schema drafter declared over `name` (its forced tokens, then `name`'s guesses); None where none is."""
    return next((s.name for s in drafters() if s.inner == name), None)


_FORCED = "the schema's forced tokens (constrained runs; no model runs), then "
register_drafter(_schema_spec("llama.cpp", "schema + llama.cpp", "llama.cpp's guesses (embedded target only)", "draft",
                              (DRAFT,), requires=_embedded_only, installed=_llama_cpp_installed))
register_drafter(_schema_spec("draft", "schema + draft model", "the pair's draft model's guesses", "draft", (DRAFT,),
                              draft_model=True))
register_drafter(_schema_spec("lookup", "schema + lookup", "prompt lookup", "lookup", (LOOKUP,)))
register_drafter(_schema_spec("suffix", "schema + suffix", "suffix decoding", "suffix", (SUFFIX,),
                              installed=_suffix_installed, new_memory=_suffix_memory))
