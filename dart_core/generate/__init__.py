"""``python -m dart_core.generate`` (``__main__``): one prompt through every loaded racer on one shared target.
The library it drives is :func:`dart_core.engine.loop.stream` via :func:`dart_core.arena.load_arena`; this package
holds only the command line, so importing the engine never imports argparse front ends."""
