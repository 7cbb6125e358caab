"""Plain data types shared by the engine, the CLI and the GUI (no behaviour, no Qt)."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence



KV_STORE_MODEL = "model"          # saved KV in the model's own dtype: lossless (the default)
KV_STORE_FLOAT16 = "float16"      # half the bytes; resumed logits differ slightly (docs/BENCHMARKS.md)
KV_STORES = (KV_STORE_MODEL, KV_STORE_FLOAT16)

class SessionKind(str, enum.Enum):
    PINNED = "pinned"        # transcript + KV on disk, resumes without prefill
    REGULAR = "regular"      # KV in memory (and the shared expiring cache)
    TEMPORARY = "temporary"  # never on disk; close frees everything


class OverflowPolicy(str, enum.Enum):
    """What a turn does when the history no longer fits the context window (per chat, or a default)."""
    STOP = "stop"                        # refuse the turn: finish_reason context_full
    TRUNCATE_MIDDLE = "truncate_middle"  # keep the system prompt and the latest turns (the default)
    ROLLING = "rolling"                  # keep only the latest turns that fit


class FinishReason(str, enum.Enum):
    EOS = "eos"                    # the model emitted an end-of-sequence token
    STOP = "stop"                  # a stop string matched (not emitted)
    LENGTH = "length"              # max_new_tokens reached
    CONTEXT_FULL = "context_full"  # the model's context window is full
    CANCELLED = "cancelled"        # cancelled by the caller


class KVLocation(str, enum.Enum):
    NONE = "none"
    MEMORY = "memory"
    DISK = "disk"


@dataclass(frozen=True)
class OutputConstraint:
    """What every generated token must keep the reply within, enforced while sampling.

    Plain data: make one with `engine.text.constraints` (`json_schema`, `json_object`, `lark`),
    which checks it; the engine binds it to the model's tokenizer when a generation starts.
    `kind` is "json_schema", "json_object" or "lark"; `source` is the schema as canonical JSON
    text, or the Lark grammar ("" for json_object)."""
    kind: str
    source: str = ""


@dataclass
class SamplingParams:
    """How to pick the next token. `None` fields fall back to the model's generation_config.json."""
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    greedy: bool = False
    max_new_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    overflow: str = OverflowPolicy.TRUNCATE_MIDDLE.value   # an OverflowPolicy value
    frequency_penalty: float | None = None   # OpenAI's: subtracted once per occurrence of a seen token
    # Added to the logits before sampling, by token id (OpenAI's logit_bias); -100 bans the token.
    logit_bias: dict[int, float] | None = None
    # Report each sampled token's log-probability and this many most likely alternatives (None: off).
    logprobs: int | None = None
    # The reply must match this (a JSON schema, any JSON object, a Lark grammar): tokens outside it
    # are masked before each draw and the reply ends when it is complete (None: free text).
    constraint: OutputConstraint | None = None
    # Special tokens whose text the reply keeps (others add none): a tool-call format's markers.
    keep_special: tuple[str, ...] = ()


@dataclass
class GenerationFigures:
    """What one generation cost and how it started; shown by the GUI and `--json`."""
    prompt_tokens: int = 0
    reused_tokens: int = 0       # prompt tokens whose KV was already there (memory or disk)
    prefilled_tokens: int = 0    # prompt tokens computed now
    generated_tokens: int = 0
    ttft_ms: float = 0.0         # time to first token
    prefill_ms: float = 0.0
    resume_ms: float = 0.0       # time to load KV from disk (0 when none was loaded)
    decode_tokens_per_s: float = 0.0
    provider: str = ""
    finish_reason: str = ""
    resume: str = KVLocation.NONE.value   # where the reused KV came from: disk, memory or none
    cache_tokens_memory: int = 0  # reused tokens served by the shared prefix cache, memory tier
    cache_tokens_disk: int = 0    # ... disk tier
    fallback_reason: str | None = None    # why a saved KV could not be used (re-prefilled instead)
    context_used: int = 0
    context_window: int = 0
    dropped_messages: int = 0     # older messages left out to fit the context window (overflow policy)
    dropped_tokens: int = 0       # ... and their tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TokenLogprob:
    """A sampled token's log-probability under the model's own logits (log-softmax, before any
    temperature, penalty or bias) and the `top` most likely tokens there: (id, logprob), best first."""
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class TextChunk:
    """A piece of streamed text (always whole UTF-8 characters) and the token ids behind it;
    with `SamplingParams.logprobs`, the log-probabilities of the tokens sampled since the last chunk."""
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class GenerationResult:
    """The last event of a stream (`logprobs`: every chunk's, in order, with `SamplingParams.logprobs`)."""
    text: str
    token_ids: list[int]
    figures: GenerationFigures
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class PrefillProgress:
    """Prompt processing progress, sent between prefill chunks (before the first TextChunk)."""
    done: int     # prompt tokens computed so far in this turn
    total: int    # prompt tokens this turn computes (prefilled_tokens)


StreamEvent = TextChunk | PrefillProgress | GenerationResult


@dataclass
class ChatMessage:
    role: str      # "system" | "user" | "assistant"
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class SessionInfo:
    session_id: str
    kind: SessionKind
    tokens: int                  # tokens in the session's history
    kv_location: KVLocation
    kv_bytes_memory: int
    kv_bytes_disk: int
    cache_salt: str | None = None
    saving: bool = False         # a background save is in flight
    save_error: str | None = None  # the last background save failed (the session still works in memory)
    manifest_error: str | None = None  # its saved manifest was damaged (moved aside; the previous version used)


class ChatTemplateSource(Protocol):
    """What a chat template shows of itself: its Jinja source, and the other named templates the
    model ships (e.g. "tool_use")."""

    @property
    def source(self) -> str: ...

    @property
    def named_sources(self) -> Mapping[str, str]: ...


class CancelToken(Protocol):
    def is_set(self) -> bool: ...


# ---- what a ChatEngine raises -----------------------------------------------------------------
class SessionError(Exception):
    """A session operation cannot be done; the message says why. The base of the typed errors
    below: `except SessionError` catches every one of them."""


class SessionNotOpen(SessionError):
    """The session is not open in this engine: never opened since it started, or closed, or deleted.
    Opening it again (`open`) is the way back; a pinned one resumes from disk."""


class SessionBusy(SessionError):
    """The session is generating already, or open in another Amber process, or the KV store is
    busy with another process's save: try again later."""


class SessionKindConflict(SessionError):
    """A temporary session cannot be pinned, become persistent (or the other way round), or
    reuse the id of a session saved on disk."""


class CacheSaltMismatch(SessionError):
    """The session has a cache salt and was opened with another one (or none)."""


class ModelNotReady(SessionError):
    """The engine was shut down (quitting, or its model being switched): nothing runs on it any more."""


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do, as data (callers branch on these, never on the engine's type)."""
    remote: bool = False            # the model runs on another machine: it cannot delete local KV files
    per_chat_salt: bool = False     # wants a cache salt stored with each non-temporary chat (opened with it)
    batches_decode: bool = False    # concurrent generations share decode steps: callers may run them in parallel
    token_prompts: bool = False     # also a `TokenEngine`: token-id prompts and its tokenizer (raw completions)
    state_dir: Path | None = None   # where pinned sessions are saved (they resume after a restart); None: nowhere
    provider_fallback: str | None = None   # why it runs on the CPU though a GPU was asked for
    # How the model writes tool calls, as its chat template teaches it (engine.text.tool_calls'
    # format names: "hermes", "llama3", "mistral", "mistral_args"); None: the model is shown no tools.
    tool_format: str | None = None


class ChatEngine(Protocol):
    """What the GUI needs from the engine: a session manager over one loaded model.

    `engine.sessions.manager.SessionManager` and `engine.remote.RemoteEngine` implement it (mypy
    checks that: engine/conformance.py); GUI tests use a fake that does only what the contract
    suite (tests/engine/test_engine_contract.py) shows the real engines do.
    Every method may be called from any worker thread; none must be called on the UI thread.
    Errors are the `SessionError` subclasses above, as each method says; a remote engine also
    raises `engine.remote.RemoteError` when its server fails or cannot be reached.
    """

    # Read-only: implementations compute them (properties) or set them once they know the model.
    @property
    def provider(self) -> str: ...

    @property
    def context_window(self) -> int: ...

    @property
    def model_name(self) -> str: ...

    @property
    def capabilities(self) -> EngineCapabilities: ...

    def open(self, session_id: str, kind: SessionKind = SessionKind.REGULAR,
             cache_salt: str | None = None) -> SessionInfo:
        """Opens the session (a pinned one saved on disk resumes), creating it when new; opening an
        open one again gives it `kind` (pins or unpins it). SessionKindConflict: temporary to or
        from persistent; CacheSaltMismatch; SessionBusy: open in another Amber process;
        ModelNotReady: the engine was shut down."""
        ...

    def generate(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                 sampling: SamplingParams | None = None,
                 cancel: CancelToken | None = None,
                 tools: list[dict[str, Any]] | None = None) -> Iterator[StreamEvent]:
        """Streams the reply to `messages` (the whole chat): `PrefillProgress`, `TextChunk`s, then
        one `GenerationResult` (finish_reason "cancelled" once `cancel` is set). SessionNotOpen;
        SessionBusy: it is generating already; ModelNotReady. They may be raised at the call or
        at the first event.

        A message may be a mapping in the chat template's terms: an assistant turn with
        `tool_calls`, a `tool` turn with its result. `tools` (OpenAI function schemas) are shown
        to the model through its template; only where `capabilities.tool_format` is set (an
        engine without one refuses them with ValueError)."""
        ...

    def pin(self, session_id: str) -> None:
        """Makes an open session persistent (its KV is saved in the background: `info().saving`).
        SessionNotOpen; SessionKindConflict: a temporary session."""
        ...

    def unpin(self, session_id: str) -> None:
        """Back to regular: what was saved for it goes. SessionNotOpen. A regular one: nothing."""
        ...

    def close(self, session_id: str) -> None:
        """Frees the session's memory (a pinned one stays on disk; a temporary one is gone).
        A session that is not open: nothing."""
        ...

    def delete(self, session_id: str) -> None:
        """Forgets the session, open or not: memory and whatever was saved. SessionBusy: open in
        another Amber process."""
        ...

    def info(self, session_id: str) -> SessionInfo:
        """Where the open session's KV is and how big. SessionNotOpen."""
        ...

    def stats(self) -> dict[str, Any]: ...

    def clear_cache(self) -> int:
        """Empties the shared prefix cache (pinned sessions keep theirs); how many blocks went."""
        ...

    def count_tokens(self, text: str) -> int | None:
        """How many tokens `text` is for the model (its own tokenizer, no special tokens added);
        None when the engine cannot count them (a remote server without a tokenizer endpoint)."""
        ...

    def shutdown(self, timeout: float = 10.0) -> None: ...


class TokenEngine(ChatEngine, Protocol):
    """A `ChatEngine` that also takes token-id prompts and tokenizes (`capabilities.token_prompts`):
    what the API server's raw completions and prompt limits need."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def model_fingerprint(self) -> str:
        """A stable hash of the model's graph, weights and tokenizer (the API's system_fingerprint)."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token id stands for in text (the API's log-probabilities show them)."""
        ...

    def encode_chat(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The prompt token ids of `messages` under the model's chat template (messages as
        transformers takes them, tool calls and results included; `tools`: function schemas)."""
        ...

    @property
    def chat_template(self) -> ChatTemplateSource:
        """The model's chat template (engine.text.chat_template.ChatTemplate): its source tells which
        tool-call format it teaches."""
        ...

    def encode_prompt(self, prompt: str) -> list[int]:
        """The token ids of a raw prompt (no chat template)."""
        ...

    def generate_tokens(self, session_id: str, prompt_ids: Sequence[int], sampling: SamplingParams | None = None,
                        cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        """As `generate`, for a prompt given as token ids; the same errors."""
        ...

    def generate_choices(self, session_id: str, prompt_ids: Sequence[int], samplings: Sequence[SamplingParams],
                         cancel: CancelToken | None = None) -> Iterator[tuple[int, StreamEvent]]:
        """`len(samplings)` replies to one token prompt (the API's `n`), each sampled with its own
        parameters, as (choice index, event): the prompt is computed once (its `PrefillProgress`
        counts as choice 0's) and the replies are decoded together; each choice ends with its own
        `GenerationResult` (choice 0's figures count the prefill, the others' the prompt as
        reused). The session keeps choice 0's reply. The errors of `generate`."""
        ...
