"""DART Arena's comparison app: the registered racers (DART, EAGLE-3, DFlash, …, plain decoding) side by side on
one shared target.

``python -m dart_arena`` (see ``dart_arena/__main__.py``); the race logic is in ``dart_core.race`` (no Gradio), the
figures in ``dart_arena.plots``, the HTML in ``dart_arena.render``, the page in ``dart_arena.ui``, the model's own
process in ``dart_arena.model_process``, the server's side of it in ``dart_arena.model_client``.
"""

import logging


def setup_logging(debug: bool = False) -> logging.Logger:
    """Our progress lines on stderr, without turning on every library's INFO logging; ``debug`` (``--debug``) also
    shows our debug lines, among them the traceback of a start-up error."""
    root = logging.getLogger("dart_arena")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[dart-arena] %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    if debug:
        root.setLevel(logging.DEBUG)
    return logging.getLogger("dart_arena.app")
