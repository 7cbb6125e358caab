"""What `python -m bench compare` (bench.suites.shapes) measures and scores, shared with bench.suites.shapes_doc,
which renders its results: llama.cpp's context, the targets, and the Amber columns' names."""
from __future__ import annotations

N_CTX = 2304            # llama.cpp's context: room for the 2048 prefill and 1000 + steps (Amber sizes to need)
TARGETS = {"decode": 1.2, "prefill_2048": 1.5, "rss": 1.2, "bw_share": 0.70}
AMBER_NOSPIN = "Amber, ORT spinning off"   # an experiment: not the engine's path unless it adopts it
AMBER_NATIVE = "Amber native"              # the native form's column when "ort" is scored
AMBER_ORT = "Amber ORT form"               # the ORT form's column when "native" (the default) is scored
# A second Amber conversion measured beside the scored one: its column, its ratios to llama.cpp's
# best, and its ratios to the scored column (keys of a stored result).
SECOND = {"native": (AMBER_NATIVE, "ratios_native", "ratios_native_vs_ort"),
          "ort": (AMBER_ORT, "ratios_ort", "ratios_ort_vs_native")}
