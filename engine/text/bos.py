"""A prompt's beginning-of-sequence token: exactly one where the model wants one.

Models say so in `add_bos_token` of tokenizer_config.json (GGUF's `tokenizer.ggml.add_bos_token`,
which Amber's importer copies there), or, without that key, through their tokenizer's own
post-processor (it prepends the BOS when encoding with special tokens). Chat templates usually write
`{{ bos_token }}` themselves and some do not (llama.cpp adds the BOS beside the template); raw
completion text may or may not start with it. Either way the prompt starts with one BOS, never two,
and a model that wants none (Qwen) gets none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tokenizers import Tokenizer

from engine.text.chat_template import token_string


@dataclass(frozen=True)
class BosPrefix:
    """The BOS a model's prompts start with (`token`, `token_id`), or None for a model without."""
    token: str | None = None
    token_id: int | None = None

    def text(self, prompt: str) -> str:
        """A rendered chat template starting with the BOS (added only when it does not already)."""
        if self.token is None or prompt.startswith(self.token):
            return prompt
        return self.token + prompt

    def ids(self, prompt_ids: list[int]) -> list[int]:
        """Token ids starting with the BOS id (added only when they do not already)."""
        if self.token_id is None or prompt_ids[:1] == [self.token_id]:
            return prompt_ids
        return [self.token_id, *prompt_ids]


def bos_prefix(tokenizer: Tokenizer, tokenizer_config: Mapping[str, Any]) -> BosPrefix:
    """What `tokenizer_config` (else the tokenizer's post-processor) says about the BOS."""
    bos = token_string(tokenizer_config.get("bos_token"))
    bos_id = tokenizer.token_to_id(bos) if bos else None
    # A BOS that is not one token of its own when written as text cannot be added as text.
    if bos is None or bos_id is None or tokenizer.encode(bos, add_special_tokens=False).ids != [bos_id]:
        return BosPrefix()
    wanted = tokenizer_config.get("add_bos_token")
    if not isinstance(wanted, bool):
        wanted = tokenizer.encode("a", add_special_tokens=True).ids[:1] == [bos_id]
    return BosPrefix(bos, bos_id) if wanted else BosPrefix()
