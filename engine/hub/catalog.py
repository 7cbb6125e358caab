"""The curated list of recommended chat models (data: recommended.json, next to this file)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("recommended.json")


@dataclass(frozen=True)
class Recommended:
    repo: str
    file: str            # "" when only the quant is known: pick it from the repo's file list
    quant: str
    architecture: str
    params: str
    title: str
    note: str

    @property
    def is_onnx(self) -> bool:
        return self.quant == "ONNX"


@lru_cache(maxsize=1)
def recommended() -> tuple[Recommended, ...]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    return tuple(Recommended(**{k: str(m.get(k, "")) for k in Recommended.__dataclass_fields__})
                 for m in data["models"])


def supported_architectures() -> tuple[str, ...]:
    """The GGUF architectures this build's converter accepts (other helpers add to the list)."""
    from engine.convert.gguf_source import SUPPORTED_ARCHITECTURES
    return tuple(SUPPORTED_ARCHITECTURES)
