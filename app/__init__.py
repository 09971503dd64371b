"""DART Arena's comparison app: DART, EAGLE-3 and plain decoding racing side by side on one shared target.

``python -m app`` (see ``app/__main__.py``); the race logic is in ``app.race`` (no Gradio), the figures in
``app.plots``, the HTML in ``app.render``, the page in ``app.ui``.
"""
