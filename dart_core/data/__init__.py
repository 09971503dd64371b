"""The text the project reads and writes prompts from, for training and benchmarks alike: the seeded chat prompt
set (:mod:`.prompts`), Python's standard library as the toy's corpus (:mod:`.corpus`) and the named benchmark
sets such as MT-bench (:mod:`.datasets`)."""
