"""The checkpoint file layouts, in one table: which files hold a model's weights (a shard index or one file, in
safetensors or a ``weights_only`` pickle), which a tokenizer reads, and the dtype names a command line accepts.
The loaders (``hub``, ``target_files``, the drafters' checkpoint code) and the launch check (``preflight``) read
the same names from here, so a layout added once is found, loaded and checked everywhere."""

from __future__ import annotations

# (shard index, the single file in its place), preferred first: safetensors before the pickled format
WEIGHT_LAYOUTS = (("model.safetensors.index.json", "model.safetensors"),
                  ("pytorch_model.bin.index.json", "pytorch_model.bin"))
SHARD_INDEXES = tuple(index for index, _ in WEIGHT_LAYOUTS)
SINGLE_WEIGHTS = tuple(single for _, single in WEIGHT_LAYOUTS)
SAFE_SINGLE = SINGLE_WEIGHTS[0]  # model.safetensors: the one file of a drafter in the safetensors-only formats

# JSON files a tokenizer reads (config.json too: AutoTokenizer reads the model type from it), in reading order
TOKENIZER_JSON = ("config.json", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                  "added_tokens.json")
SLOW_TOKENIZER_FILES = ("tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
# every file a tokenizer may need (what the launch check plans to fetch), and those of which one makes a tokenizer
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")
TOKENIZER_CORE = ("tokenizer.json", "tokenizer.model", "vocab.json")

# dtype names of the command lines (--dtype), each to its canonical torch name, and that dtype's bytes per value
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
               "bfloat16": "bfloat16", "bf16": "bfloat16"}
DTYPE_BYTES = {name: {"float32": 4, "float16": 2, "bfloat16": 2}[canonical] for name, canonical in DTYPE_NAMES.items()}
