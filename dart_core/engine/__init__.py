"""The decoding engine, which names no method: the canonical draft tree (``tree``), the stock HF target with tree
verification and KV compaction (``target``), what a target's config says (``hf_config``), the acceptance rules
(``verify``), the loop that yields one Step per target forward (``loop.stream``), the greedy check and the clocks.
It imports only ``dart_core.loading`` below it."""
