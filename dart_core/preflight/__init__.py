"""The launch check: everything a launch names, resolved and checked before any weight is read.

Why: on a GPU host a missing drafter, a mistyped N-gram repo or a drafter built for another target used to surface
only after the target had loaded (minutes for a large model), one problem per attempt, sometimes as a traceback.
Here every piece is found from file listings and small metadata files alone — ``config.json``, shard indexes and
the 8-byte length + JSON header of each safetensors file, never tensor data — either in a local directory, in the
local Hugging Face cache (``HF_HUB_OFFLINE``, or the Hub unreachable) or through the Hub's file listing; the device,
the memory the plan needs and the server port are checked too, and ALL problems are reported at once, each with the
command that fixes it. No Gradio here, no model code, and no command line: the check must answer in well under the time
the import of a model takes, and the app turns its own flags into a plan (``dart_arena/launch_check.py``).

The modules: ``plan`` (the plan and its problems, as data), ``sources`` (a reference's files and headers, read
without weights), ``checks`` (the target, each drafter in its racer's declared checkpoint format, the N-gram
store), ``resources`` (device, memory, disk, port), ``published`` (the published Qwen3 targets and drafters, for
the fixes) and ``launch`` (:func:`plan_launch`, :func:`download`: the whole check).
"""
