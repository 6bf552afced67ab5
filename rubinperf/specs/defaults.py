"""What a run uses when the command line names nothing: the model, the racks and the engine shapes.

The engine shapes are those of the vLLM DeepSeek-V4.1-Flash posts (GB300 NVL72, Oct 2026; Vera Rubin NVL72,
Nov 2026): DEP2 prefill, Wide-EP DEP32 decode, TP8 low-latency decode. Imports nothing (the CLI reads it at
start-up).
"""

DEFAULT_MODEL = "deepseek-v4.1-flash"
DEFAULT_HARDWARE = ("gb300-nvl72", "vr-nvl72")   # the racks compared; a command that takes one rack uses the first
DEFAULT_ENGINES = (("dep2", "prefill", 1), ("dep32", "decode", 16), ("tp8", "decode", 1))
DEFAULT_CONTEXT = 131072
