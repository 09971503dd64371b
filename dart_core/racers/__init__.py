"""The racers: ``registry`` is the one list of methods (key, label, colour, drafter loader, settings, checkpoint
format, bundle folder) that every front end derives from, and the only place outside a drafter's own module that
names a racer; ``hf_generate`` is transformers' own ``generate`` as a racer with a loop of its own, ``llamacpp``
llama.cpp on the same weights with a loop and an engine of its own."""
