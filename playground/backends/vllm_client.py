"""A client of a running vLLM OpenAI-compatible server: one streamed completion -> per-step records.

    client = VllmClient("http://127.0.0.1:8000")
    for record in client.stream("def fib(n):", max_tokens=64):        # or prompt=[token ids], messages=[...]
        if isinstance(record, ServedStep): ...    # live, one per chunk (provisional roles)
        else: request = record                    # the ServedRequest: final steps, histogram, totals

Requests go to /v1/completions with the prompt as token ids (a chat is rendered by the server's /tokenize,
or by the caller's tokenizer), greedy unless told otherwise, `return_token_ids` and
`stream_options.include_usage`: vLLM then sends each step's new token ids and, in the final usage chunk,
`metrics` (per-request timing; `speculative_decoding` with the per-step arrays). The standard library's
urllib does the HTTP, so the playground takes no new dependency; every socket read has a timeout, so a
stalled server ends in an error, not a hang. Every failure a person can fix is a VllmClientError.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import PlaygroundError
from .vllm_ngram import check_replay, replay_vllm
from .vllm_server import SpecConfig
from .vllm_steps import Chunk, ServedRequest, ServedStep, VllmSpecMetrics, build_request, live_step

FLAGS = ("--enable-per-request-metrics (and, with a speculative config, "
         "--per-request-spec-decode-metrics detailed)")


EVERY_STEP_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "medusa")  # they draft at every decode step


class VllmClientError(PlaygroundError):
    """The server cannot be reached, serves another model, refused the request, or lacks the metrics flags."""


class VllmClient:
    def __init__(self, url: str, timeout: float = 60.0, spec: SpecConfig | None = None):
        """`url`: the server's base URL (http://host:port, with or without /v1). `timeout`: seconds any one
        read may wait. `spec`: the server's speculative config when the caller knows it (the server manager
        does): with n-gram, the steps without a draft are then told apart exactly (vllm_ngram)."""
        if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", url or ""):
            raise VllmClientError(f"a vLLM server URL looks like http://127.0.0.1:8000, got {url!r}")
        self.url = url.rstrip("/").removesuffix("/v1")
        self.timeout = timeout
        self.spec = spec
        self._speculative: bool | None = None

    # --- plain requests ---------------------------------------------------------------------------------

    def _open(self, path: str, body: dict | None = None, timeout: float | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise VllmClientError(f"the vLLM server at {self.url} refused {path} (HTTP {e.code}): "
                                  f"{_error_message(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise VllmClientError(f"no vLLM server answers at {self.url} ({reason}); start one with "
                                  "`python -m playground vllm-serve` or check the URL") from None

    def _json(self, path: str, body: dict | None = None):
        with self._open(path, body, timeout=min(self.timeout, 30)) as r:
            try:
                return json.loads(r.read())
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise VllmClientError(f"{self.url}{path} did not answer JSON: is this a vLLM server?") from None

    def health(self) -> bool:
        with self._open("/health", timeout=min(self.timeout, 10)) as r:
            return r.status == 200

    def models(self) -> list[str]:
        doc = self._json("/v1/models")
        try:
            return [m["id"] for m in doc["data"]]
        except (KeyError, TypeError):
            raise VllmClientError(f"{self.url}/v1/models is not an OpenAI model list: is this a vLLM server?") from None

    def check(self, model: str | None = None) -> str:
        """The model to ask for: `model` when the server serves it (else a clear error), else the first served."""
        served = self.models()
        if not served:
            raise VllmClientError(f"the vLLM server at {self.url} serves no model")
        if model is None:
            return served[0]
        if model not in served:
            raise VllmClientError(f"the vLLM server at {self.url} serves {', '.join(served)}, not {model!r}")
        return model

    def metrics_text(self) -> str:
        with self._open("/metrics", timeout=min(self.timeout, 30)) as r:
            return r.read().decode("utf-8", "replace")

    def spec_counters(self) -> SpecCounters | None:
        """The server's cumulative speculative-decoding counters from Prometheus /metrics (all requests so far);
        None for a server without a speculative config."""
        return spec_counters(self.metrics_text())

    def speculative(self) -> bool:
        """Whether the server runs a speculative config (its /metrics has the spec_decode counters)."""
        if self._speculative is None:
            self._speculative = self.spec_counters() is not None
        return self._speculative

    def tokenize(self, text: str | None = None, messages: Sequence[dict] | None = None, model: str | None = None) -> list[int]:
        """Token ids by the server's tokenizer: a raw text, or chat messages through its chat template."""
        body: dict = {"model": self.check(model)}
        if messages is not None:
            body.update(messages=[dict(m) for m in messages], add_generation_prompt=True)
        else:
            body.update(prompt=text, add_special_tokens=True)
        return list(self._json("/tokenize", body)["tokens"])

    def detokenize(self, token_ids: Sequence[int], model: str | None = None) -> str:
        return self._json("/detokenize", {"model": self.check(model), "tokens": list(token_ids)})["prompt"]

    # --- the streamed completion ------------------------------------------------------------------------

    def stream(self, prompt: str | Sequence[int] | None = None, *, messages: Sequence[dict] | None = None,
               max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None, model: str | None = None,
               ignore_eos: bool = False, response_format: dict | None = None) -> Iterator[ServedStep | ServedRequest]:
        """Live ServedSteps, one per chunk, then the ServedRequest (see the module docstring). `response_format`:
        OpenAI's field, passed as it is (`json_schema_format` makes one that constrains the output to a schema)."""
        model = self.check(model)
        if messages is not None:
            prompt = self.tokenize(messages=messages, model=model)
        if prompt is None or (not isinstance(prompt, str) and not prompt):
            raise VllmClientError("give a prompt (text or token ids) or chat messages")
        body = {"model": model, "prompt": prompt if isinstance(prompt, str) else [int(t) for t in prompt],
                "max_tokens": int(max_tokens), "temperature": float(temperature), "stream": True,
                "stream_options": {"include_usage": True}, "return_token_ids": True, "ignore_eos": bool(ignore_eos)}
        if seed is not None:
            body["seed"] = int(seed)
        if response_format is not None:
            body["response_format"] = response_format
        chunks: list[Chunk] = []
        prompt_ids: list[int] = []
        final: dict | None = None
        t0 = time.perf_counter()
        with self._open("/v1/completions", body) as response:
            for event in _events(response, self.url):
                if event.get("choices"):
                    choice = event["choices"][0]
                    prompt_ids = choice.get("prompt_token_ids") or prompt_ids
                    ids = choice.get("token_ids")
                    if ids is None:
                        raise VllmClientError(f"the vLLM server at {self.url} sent no token ids (return_token_ids); "
                                              "it is too old for the playground (vLLM >= 0.10)")
                    chunk = Chunk(tuple(ids), choice.get("text") or "", time.perf_counter() - t0,
                                  choice.get("finish_reason"))
                    chunks.append(chunk)
                    yield live_step(chunk, len(chunks) - 1, chunks[-2].arrived_s if len(chunks) > 1 else 0.0)
                elif "usage" in event:
                    final = event
        yield self._finish(model, prompt_ids, chunks, final)

    def _finish(self, model: str, prompt_ids: list[int], chunks: list[Chunk], final: dict | None) -> ServedRequest:
        if not chunks:
            raise VllmClientError(f"the vLLM server at {self.url} streamed no tokens")
        metrics = (final or {}).get("metrics")
        if not metrics or "time_to_first_token_ms" not in metrics:
            raise VllmClientError(f"the vLLM server at {self.url} sent no per-request metrics: start it with {FLAGS}")
        sent = metrics.get("speculative_decoding")
        if sent is None and self.speculative():
            raise VllmClientError(f"the vLLM server at {self.url} runs a speculative config but sent no "
                                  f"speculative_decoding metrics: start it with {FLAGS}")
        spec = VllmSpecMetrics.parse(sent)
        if spec and spec.num_spec_steps and not spec.per_step_accepted:
            raise VllmClientError(f"the vLLM server at {self.url} sent only summary speculative metrics, no per-step "
                                  "arrays: start it with --per-request-spec-decode-metrics detailed")
        drafted_at = None
        if self.spec is not None and self.spec.method == "ngram" and spec:
            output = [t for c in chunks for t in c.token_ids]
            rep = replay_vllm(prompt_ids, output, self.spec.k, self.spec.prompt_lookup_min, self.spec.prompt_lookup_max)
            if check_replay(rep, spec)[0]:  # trusted only where it reproduces vLLM's own per-step arrays
                drafted_at = rep.drafted_at
        every_step = self.spec is not None and self.spec.method in EVERY_STEP_METHODS
        return build_request(model, len(prompt_ids), chunks, metrics, drafted_at, every_step)

    def run(self, prompt=None, **kwargs) -> ServedRequest:
        """The ServedRequest of one streamed completion (the live records dropped)."""
        *_, last = self.stream(prompt, **kwargs)
        return last


def json_schema_format(schema: dict, name: str = "output") -> dict:
    """OpenAI's response_format that constrains a completion to `schema` (vLLM's structured outputs)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def stream_request(url: str, prompt: str | Sequence[int] | None = None, *, spec: SpecConfig | None = None,
                   timeout: float = 60.0, **kwargs) -> Iterator[ServedStep | ServedRequest]:
    """VllmClient(url, timeout, spec).stream(prompt, **kwargs): what the browser streams from."""
    return VllmClient(url, timeout=timeout, spec=spec).stream(prompt, **kwargs)


def _events(response, url: str) -> Iterator[dict]:
    """The JSON events of a server-sent-events stream, up to [DONE]; an error event raises."""
    try:
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:
                err = event["error"]
                raise VllmClientError(f"the vLLM server at {url} failed the request: "
                                      f"{err.get('message') if isinstance(err, dict) else err}")
            yield event
    except TimeoutError:
        raise VllmClientError(f"the vLLM server at {url} sent nothing for the read timeout; is it overloaded?") from None
    except json.JSONDecodeError:
        raise VllmClientError(f"the server at {url} streamed something that is not JSON: is it a vLLM server?") from None


def _error_message(e: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(e.read())
        err = doc.get("error", doc)
        return str(err.get("message", err) if isinstance(err, dict) else err)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, OSError):
        return e.reason or "no detail"


_COUNTER = re.compile(r'^vllm:spec_decode_(num_drafts|num_draft_tokens|num_accepted_tokens|num_accepted_tokens_per_pos)'
                      r'_total\{([^}]*)\}\s+([0-9.eE+-]+)$', re.MULTILINE)


_COUNTER_FIELD = {"num_drafts": "drafts", "num_draft_tokens": "draft_tokens", "num_accepted_tokens": "accepted_tokens"}


@dataclass(frozen=True)
class SpecCounters:
    """A speculative server's cumulative counters: drafts (verify steps), draft tokens, accepted tokens, and
    accepted tokens per draft position (0-based)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: dict[int, int] = field(default_factory=dict)


def spec_counters(text: str) -> SpecCounters | None:
    """The spec_decode counters of a Prometheus /metrics text; None where there are none (a plain server)."""
    totals: dict[str, int] = {}
    per_pos: dict[int, int] = {}
    for name, labels, value in _COUNTER.findall(text):
        if name == "num_accepted_tokens_per_pos":
            pos = re.search(r'position="(\d+)"', labels)
            if pos:
                per_pos[int(pos.group(1))] = int(float(value))
        else:
            totals[_COUNTER_FIELD[name]] = int(float(value))
    return SpecCounters(**totals, accepted_per_pos=per_pos) if totals or per_pos else None
