"""Writes a model folder as onnxruntime-genai's model builder lays it out, for the tests.

The builder writes `model.onnx` (+ `model.onnx.data`), the tokenizer files and `genai_config.json`
(hyperparameters under model.decoder, sampling defaults under search) — no `config.json`, no
`generation_config.json`. Its graphs use GroupQueryAttention like Amber's and return logits for
every position ([batch, sequence_length, vocab]). The folder is made from Amber's converted one of
the same weights: the graph keeps its nodes but skips the last-position Slices, so its logits cover
every position, and the JSON is rewritten in the builder's shape.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

INT64_MAX = np.iinfo(np.int64).max
COPIED = ("model.onnx.data", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def all_position_graph(graph: onnx.ModelProto) -> onnx.ModelProto:
    """Replaces the Slices that keep only the last position (end = INT64_MAX) by Identity."""
    ends = {t.name for t in graph.graph.initializer
            if t.data_location != onnx.TensorProto.EXTERNAL and t.dims == [1]
            and numpy_helper.to_array(t).tolist() == [INT64_MAX]}
    nodes, replaced = [], 0
    for node in graph.graph.node:
        if node.op_type == "Slice" and len(node.input) >= 3 and node.input[2] in ends:
            nodes.append(helper.make_node("Identity", [node.input[0]], list(node.output), name=node.name))
            replaced += 1
        else:
            nodes.append(node)
    assert replaced == 2, f"expected the 2 last-position Slices, found {replaced}"
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    logits = next(o for o in graph.graph.output if o.name == "logits")
    dims = logits.type.tensor_type.shape.dim
    dims[1].Clear()
    dims[1].dim_param = "sequence_length"
    return graph


def genai_config(config: dict, generation: dict) -> dict:
    """genai_config.json as the model builder writes it (the keys Amber may read, and others)."""
    return {
        "model": {
            "bos_token_id": config["bos_token_id"], "context_length": config["max_position_embeddings"],
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx", "head_size": config["head_dim"], "hidden_size": config["hidden_size"],
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": config["num_attention_heads"],
                "num_hidden_layers": config["num_hidden_layers"],
                "num_key_value_heads": config["num_key_value_heads"],
            },
            "eos_token_id": config["eos_token_id"], "pad_token_id": generation.get("pad_token_id", 0),
            "type": config["model_type"], "vocab_size": config["vocab_size"],
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": generation.get("do_sample", False), "early_stopping": True,
            "length_penalty": 1.0, "max_length": config["max_position_embeddings"], "min_length": 0,
            "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1, "past_present_share_buffer": False,
            "repetition_penalty": generation.get("repetition_penalty", 1.0),
            "temperature": generation.get("temperature", 1.0), "top_k": generation.get("top_k", 50),
            "top_p": generation.get("top_p", 1.0),
        },
    }


def write_genai_folder(converted: Path | str, dest: Path | str) -> Path:
    converted, dest = Path(converted), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    graph = onnx.load(str(converted / "model.onnx"), load_external_data=False)
    onnx.save_model(all_position_graph(graph), str(dest / "model.onnx"))
    for name in COPIED:
        if (converted / name).is_file():
            shutil.copyfile(converted / name, dest / name)
    config = json.loads((converted / "config.json").read_text())
    generation = json.loads((converted / "generation_config.json").read_text())
    (dest / "genai_config.json").write_text(json.dumps(genai_config(config, generation), indent=4))
    return dest
