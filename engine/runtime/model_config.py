"""Checks of a model folder's files before anything is sized or looked up from them.

A model folder is untrusted input (downloaded, copied, edited by hand): `config.json` values of
the wrong type, generation settings out of range, or a `model.onnx.data` that is empty or cut
short get one `ModelLoadError` naming the file and the key, instead of a traceback from deep
inside the loader or ONNX Runtime's own log lines.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable


MAX_JSON_BYTES = 64 << 20      # config files; tokenizer.json is parsed by `tokenizers` itself
MAX_DIM = 1 << 24              # any hyperparameter (layers, heads, widths, positions)

# config.json keys the engine reads: each must be a positive integer when present (null = absent).
POSITIVE_INT_KEYS = ("max_position_embeddings", "n_positions", "num_key_value_heads", "num_attention_heads",
                     "hidden_size", "head_dim", "num_hidden_layers", "vocab_size")
# eos ids stop generation, so they must be real ids; bos/pad are only passed through, and old
# Llama configs write "pad_token_id": -1 for "none", so any integer is accepted there.
TOKEN_ID_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id")
NEGATIVE_OK = ("bos_token_id", "pad_token_id")


class ConfigError(ValueError):
    """A model-folder file is unusable; the message names the file and the key."""


def read_json_object(path: Path, required: bool) -> dict[str, Any]:
    """The JSON object in `path` ({} when absent and not required); `ConfigError` otherwise."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{path}: missing") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):    # a FIFO would block the open; a folder cannot be read
        raise ConfigError(f"{path}: not a regular file")
    if st.st_size > MAX_JSON_BYTES:
        raise ConfigError(f"{path}: {st.st_size} bytes, more than a config file can be ({MAX_JSON_BYTES})")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:      # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"{path}: not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def check_token_ids(data: dict[str, Any], path: Path) -> None:
    """eos/bos/pad ids: an id >= 0, a list of them, or null."""
    for key in TOKEN_ID_KEYS:
        value = data.get(key)
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        low = -(1 << 31) if key in NEGATIVE_OK else 0
        if not all(_is_int(i) and low <= i < 1 << 31 for i in ids):
            raise ConfigError(f"{path}: {key} should be a token id or a list of token ids, found {_show(value)}")


def check_config(config: dict[str, Any], path: Path) -> None:
    """config.json: the hyperparameters the engine reads have the types it expects."""
    for key in POSITIVE_INT_KEYS:
        value = config.get(key)
        if value is not None and not (_is_int(value) and 0 < value <= MAX_DIM):
            raise ConfigError(f"{path}: {key} should be a positive integer, found {_show(value)}")
    check_token_ids(config, path)


def check_generation_config(gen: dict[str, Any], path: Path,
                            resolve: Callable[[dict[str, Any]], object]) -> None:
    """generation_config.json: token ids, and sampling defaults the sampler would accept."""
    check_token_ids(gen, path)
    do_sample = gen.get("do_sample")
    if do_sample is not None and not isinstance(do_sample, bool):
        raise ConfigError(f"{path}: do_sample should be true or false, found {_show(do_sample)}")
    try:
        resolve(gen)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def check_tokenizer_config(tc: dict[str, Any], path: Path) -> None:
    """tokenizer_config.json: eos_token is a string, {"content": string}, or null."""
    eos = tc.get("eos_token")
    if eos is None or isinstance(eos, str):
        return
    if isinstance(eos, dict) and isinstance(eos.get("content"), str):
        return
    raise ConfigError(f"{path}: eos_token should be a string or {{\"content\": string}}, found {_show(eos)}")


EXTERNAL = 1     # onnx TensorProto.DataLocation.EXTERNAL (onnx itself is not imported: graph_scan)


def _external(tensor: Any) -> dict[str, str] | None:
    if tensor.data_location != EXTERNAL:
        return None
    return {e.key: e.value for e in tensor.external_data}


def check_external_data(proto: Any, graph: Path) -> None:
    """Every external-data reference names a regular file inside the model's folder that holds
    the bytes it points at, so ONNX Runtime never reads past an end, follows a path out of the
    folder, or blocks on a FIFO. `proto`: an onnx ModelProto or graph_scan's reading of one."""
    folder = graph.parent.resolve()
    sizes: dict[str, int] = {}
    for tensor in proto.graph.initializer:
        info = _external(tensor)
        if info is None:
            continue
        location = info.get("location", "")
        target = (folder / location).resolve()
        if not location or os.path.isabs(location) or folder not in target.parents:
            raise ConfigError(f"{graph}: tensor {tensor.name} points outside the model folder ({location!r})")
        if location not in sizes:
            try:
                st = target.stat()
            except OSError:
                raise ConfigError(f"{target}: missing (the weights of {graph.name})") from None
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{target}: not a regular file (the weights of {graph.name})")
            sizes[location] = st.st_size
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise ConfigError(f"{graph}: tensor {tensor.name} has a malformed external-data entry") from None
        if length < 0:
            continue     # no length recorded: ONNX Runtime checks it against the tensor's shape
        size = sizes[location]
        if offset < 0 or offset + length > size:
            what = "empty" if size == 0 else "truncated"
            raise ConfigError(f"{target}: {what} (tensor {tensor.name} needs bytes up to {offset + length}, "
                              f"the file has {size})")
