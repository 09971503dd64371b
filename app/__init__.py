"""DART Arena's comparison app: the registered racers (DART, EAGLE-3, DFlash, …, plain decoding) side by side on
one shared target.

``python -m app`` (see ``app/__main__.py``); the race logic is in ``dart_core.race`` (no Gradio), the figures in
``app.plots``, the HTML in ``app.render``, the page in ``app.ui``, the model's own process in ``app.engine``.
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
