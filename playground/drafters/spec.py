"""What a drafter is (`DrafterSpec`), what its proposals are tagged with (`Source`) and what its availability
depends on (`PairFacts`): the declarations the registry (registry.py) holds, one per drafter.

This module imports nothing heavy (torch, transformers), as the registry it serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import PlaygroundError

if TYPE_CHECKING:
    from ..core.proposal import Proposer

COSTS = ("model", "search", "none")
"""What a source's proposal costs: "model", c per token (a model ran); "search", a search per call (copied text);
"none", nothing to speak of (the schema's forced tokens)."""


HYBRID_WALK = "hybrid"  # prompt lookup (or another model-free source), else the pair's model drafter, which it wraps
REPLAY_WALKS = ("live", "pass", HYBRID_WALK)


@dataclass(frozen=True)
class Source:
    """A source a drafter's proposals are tagged with (Proposal.sources), declared in its DrafterSpec.sources."""

    name: str
    """Its tag in Proposal.sources and its key in a calibration's per-source costs."""
    label: str
    """Its words in the browser's token view."""
    copies: bool = False
    """It copies earlier text (no model ran): the token view outlines its tokens."""
    cost: str = "model"
    """What its proposals cost (COSTS): a drafter whose sources differ in it costs more than one drafter cost."""

    def __post_init__(self):
        if self.cost not in COSTS:
            raise PlaygroundError(f"a source's cost is one of {', '.join(COSTS)}, got {self.cost!r}")


LOOKUP = Source("lookup", "copied by prompt lookup", copies=True, cost="search")
DRAFT = Source("draft", "guessed by the draft model")
SUFFIX = Source("suffix", "copied from the suffix tree (this run or the tab's earlier runs)", copies=True,
                cost="search")
SCHEMA = Source("schema", "the only spelling the schema allows here (no model ran)", cost="none")


@dataclass(frozen=True)
class PairFacts:
    """What a drafter's availability depends on, known before the pair loads (the browser's menus) or after."""

    has_draft: bool
    """The pair has a draft model."""
    embedded_target: bool
    """The target is the embedded model (whose GGUF llama.cpp runs)."""
    check_installs: bool = True
    """Check optional packages (llama-cpp-python) too; False where a run asking for it says how to install it."""

    @classmethod
    def of(cls, pair, check_installs: bool = True) -> PairFacts:
        """The facts of a loaded pair (a playground.pairs.models.ModelPair)."""
        from ..pairs.models import EMBEDDED_NAME  # imports torch: only ever asked of a loaded pair, which has it

        return cls(pair.draft is not None, pair.target_name == EMBEDDED_NAME, check_installs)


@dataclass(frozen=True)
class DrafterSpec:
    """One drafter, declared once: what the CLI, the browser, replay and the lab know of it."""

    name: str
    """Its name on the command line, in requests and in results."""
    label: str
    """Its short label in the browser's menus."""
    description: str
    """One line: what it proposes (CLI help, the browser's hint)."""
    build: Callable[..., Proposer]
    """build(pair, max_ngram=3, **options) -> a proposer for this pair (a new one, unless the drafter is shared).
    Options a drafter does not use are ignored; the hybrid's `model` is the model drafter it wraps; `memory` is the
    drafter's memory (`new_memory`), None where the caller keeps none (it then starts an empty one)."""
    replay: str = "live"
    """How replay walks it: "live", a model-free drafter whose proposals depend on the text only, walked by its own
    proposer (exact); "pass", a model drafter, whose proposals replay reads from one teacher-forced pass per turn
    (playground.lab.replay.walk.shared_pass) or feeds it live; "hybrid", prompt lookup else the pair's model
    drafter, built around that drafter's walk (the `model` build option)."""
    draft_model: bool = False
    """It runs the pair's draft model (so it needs one)."""
    requires: Callable[[PairFacts], str | None] | None = None
    """Any other condition on the pair: why not, or None where it holds."""
    installed: Callable[[], tuple[bool, str]] | None = None
    """An optional package it needs: (True, what) or (False, why not and how to install it). Never raises."""
    pass_exact: Callable[..., bool] | None = None
    """replay == "pass": pass_exact(pair) is True where walks from its shared pass equal its live-fed ones."""
    sources: tuple[Source, ...] = ()
    """The sources its proposals are tagged with (Proposal.sources), for the token view and per-source costs; of
    more than one cost kind: its proposals cost more than one drafter cost (`one_cost`)."""
    auto: bool = False
    """"auto" may pick it (the first available, in registration order)."""
    new_memory: Callable[[], object] | None = None
    """It learns from earlier runs: new_memory() makes its empty memory (None: a stateless drafter). A
    `playground.drafters.conversation.Conversation` (a browser tab's, a replayed arm's, a trace turn's) keeps one
    and hands it to the build as the `memory` option; drafters declaring the same factory share it there. The
    memory has add_response(prompt_ids, response_ids), clear() and describe() (suffix_cache.SuffixCache's)."""

    schema: bool = False
    """It proposes a constrained run's forced tokens first (playground.drafters.schema), then its inner drafter's; in
    a run with no schema it is the inner drafter alone, so replay, which constrains nothing, leaves it out of its
    defaults."""
    inner: str = ""
    """A schema drafter's inner drafter (the one whose guesses follow the forced tokens); "" for the others."""

    def __post_init__(self):
        if self.schema != bool(self.inner):
            raise PlaygroundError(f"drafter {self.name!r}: a schema drafter names its inner drafter, and only it does")
        if self.replay not in REPLAY_WALKS:
            raise PlaygroundError(f"a drafter's replay walk is one of {', '.join(REPLAY_WALKS)}, got {self.replay!r}")
        if not all(isinstance(s, Source) for s in self.sources):
            raise PlaygroundError(f"a drafter's sources are Source declarations, got {self.sources!r}")

    @property
    def model(self) -> bool:
        """A model drafter: its proposals come from a model (the hybrid wraps one of these)."""
        return self.replay == "pass"

    @property
    def one_cost(self) -> bool:
        """Its proposals all cost one drafter cost c, as the fixed-k cost model's single-c predictions charge them:
        not so for a drafter whose sources differ in cost, whose copies cost a search and model proposals c."""
        return len({s.cost for s in self.sources}) <= 1

    def available(self, pair) -> tuple[bool, str]:
        """(True, "") when this drafter can run on `pair` (a loaded pair or its PairFacts); (False, why) otherwise."""
        facts = pair if isinstance(pair, PairFacts) else PairFacts.of(pair)
        if self.draft_model and not facts.has_draft:
            return False, "this model pair has no draft model; choose the 'lookup' drafter or load a draft"
        why = self.requires(facts) if self.requires is not None else None
        if why:
            return False, why
        if self.installed is not None and facts.check_installs:
            ok, what = self.installed()
            return ok, "" if ok else what
        return True, ""
