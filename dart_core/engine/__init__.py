"""The decoding engine, which names no method: the canonical draft tree (``tree``), the target state of one stream
or several (``state``), the stock HF target with tree verification and KV compaction (``target``; its fast path's
static caches for B streams: ``stream_slots``), what a target's config says (``hf_config``), the acceptance rules
(``acceptance``), the one loop over B >= 1 streams that yields a Step per stream and target forward
(``loop.stream`` / ``loop.stream_batch``), the greedy check and the clocks.
It imports only ``dart_core.loading`` below it."""
