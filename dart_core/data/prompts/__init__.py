"""The seeded chat prompt set the drafters are trained and held out on (:mod:`.chat_set`), built from code
snippets (:mod:`.code`), puzzles (:mod:`.puzzles`) and word lists (:mod:`.words`), split by topic
(:mod:`.topics`)."""
