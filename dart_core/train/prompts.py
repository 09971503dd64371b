"""Chat prompts for self-distillation: a deterministic, seeded instruction set (task templates × topics) across the
categories chat benchmarks cover (writing, roleplay, reasoning, math, coding, extraction, STEM, humanities).

The drafters learn the target's own answers to these prompts, so what matters is breadth of form (lists, code,
prose, arithmetic, dialogue), not the questions' authorship. The held-out split is by *topic* (a stable hash), so
no held-out topic is ever seen in training; none of it is taken from MT-bench or any benchmark set (a test checks
that no prompt shares an 8-word run with MT-bench)."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

TOPICS = {
    "stem": [
        "photosynthesis", "black holes", "the water cycle", "plate tectonics", "vaccines", "climate change",
        "the immune system", "DNA replication", "electric circuits", "magnetism", "the speed of light",
        "nuclear fusion", "solar panels", "volcanoes", "earthquakes", "the moon's phases", "tides", "rainbows",
        "antibiotics", "the human heart", "neurons", "batteries", "semiconductors", "the periodic table",
        "chemical bonds", "evolution", "ecosystems", "coral reefs", "the greenhouse effect", "gravity",
        "friction", "sound waves", "the Doppler effect", "quantum computing", "machine learning", "the internet",
        "GPS", "wind turbines", "recycling plastics", "ocean currents", "the ozone layer", "fermentation",
        "enzymes", "the digestive system", "sleep cycles", "blood types", "stars", "comets", "Mars",
        "the solar system", "weather forecasting", "hurricanes", "glaciers", "soil erosion", "bees and pollination",
        "radioactivity", "lasers", "3D printing", "electric cars", "hydroelectric dams",
    ],
    "humanities": [
        "the Roman Empire", "the Renaissance", "the Industrial Revolution", "ancient Egypt", "the printing press",
        "the Silk Road", "democracy in ancient Athens", "the French Revolution", "the Cold War", "the Olympic Games",
        "jazz music", "impressionist painting", "Shakespeare's plays", "Greek mythology", "the Great Wall of China",
        "the Maya civilization", "the invention of writing", "the history of money", "the Enlightenment",
        "World War I", "the space race", "the history of tea", "the Vikings", "the Ottoman Empire",
        "the civil rights movement", "existentialism", "utilitarianism", "stoicism", "supply and demand",
        "inflation", "compound interest", "the stock market", "globalization", "urbanization",
        "the history of the bicycle", "folk tales", "haiku poetry", "the Byzantine Empire", "the Aztecs",
        "the abolition of slavery", "women's suffrage", "the history of chess", "the history of cinema",
    ],
    "everyday": [
        "learning a new language", "saving money", "starting a vegetable garden", "running a first marathon",
        "working from home", "cooking for one", "adopting a dog", "moving to a new city", "public speaking",
        "time management", "healthy breakfasts", "studying for exams", "job interviews", "a rainy weekend",
        "a camping trip", "a birthday party", "a small bakery", "a neighbourhood library", "a school science fair",
        "a book club", "a hiking trail", "a train journey", "a lost umbrella", "a new smartphone", "a city park",
        "a community garden", "a street market", "a music festival", "a winter holiday", "a family reunion",
        "a coffee shop", "a first day at work", "learning to swim", "fixing a bicycle", "a home office",
        "meditation", "volunteering", "budget travel", "remote teams", "a farmers market",
    ],
}

WRITING = [
    "Write a short story about {t}.", "Write a poem about {t}.", "Write a blog post introduction about {t}.",
    "Write a persuasive paragraph on why people should care about {t}.", "Write a haiku about {t}.",
    "Write a product description for a board game about {t}.", "Write a short speech for a school assembly on {t}.",
    "Write a diary entry from someone experiencing {t} for the first time.",
    "Write a limerick about {t}.", "Write a formal letter to a newspaper editor about {t}.",
]
EXPLAIN = [
    "Explain {t} in simple terms.", "Explain {t} to a ten-year-old.", "What is the most important idea behind {t}?",
    "Give me three interesting facts about {t}.", "Summarize what is known about {t} in one paragraph.",
    "What are common misconceptions about {t}?", "Describe how {t} works, step by step.",
    "Why does {t} matter today?", "Write a short quiz with three questions about {t}, with answers.",
    "What are the pros and cons of {t}?", "Compare {t} with {u}.", "How are {t} and {u} related?",
]
ADVICE = [
    "Give me five tips for {t}.", "What should a beginner know about {t}?", "Make a checklist for {t}.",
    "What are common mistakes people make with {t}, and how can they avoid them?",
    "Plan a one-week schedule for {t}.", "Write a friendly email inviting colleagues to {t}.",
    "Describe a perfect day centred on {t}.",
]
ROLEPLAY = [
    "Pretend you are a tour guide and introduce {t}.", "Act as a teacher and start a lesson about {t}.",
    "You are a news reporter. Write a short report on {t}.",
    "Imagine you are a scientist from the year 2200 describing {t}.",
    "Role-play a conversation between two friends discussing {t}.",
    "As a detective, describe a mystery involving {t}.",
]
CODING = [
    "Write a Python function that {t}.", "Write a Python function that {t}, and explain how it works.",
    "Write a JavaScript function that {t}.", "How would you write a function that {t}? Show the code.",
    "Write a Python class that {t}, with a short usage example.", "Write unit tests for a function that {t}.",
    "Write a C function that {t}.", "What is an efficient algorithm that {t}? Give its time complexity.",
]
CODE_TASKS = [
    "reverses a linked list", "checks whether a string is a palindrome", "counts the words in a text file",
    "finds the largest element in a list", "merges two sorted lists", "computes the factorial of a number",
    "returns the n-th Fibonacci number", "removes duplicates from a list while keeping order",
    "validates an email address", "converts Celsius to Fahrenheit", "sorts a list of dictionaries by a key",
    "finds the most common letter in a string", "flattens a nested list", "computes the greatest common divisor",
    "checks whether a number is prime", "reads a CSV file and sums a column", "implements binary search",
    "implements a stack", "implements a queue with two stacks", "counts vowels in a sentence",
    "transposes a matrix", "finds all anagrams of a word in a list", "rotates an array by k positions",
    "parses a date string", "computes the average of a list of numbers", "generates a random password",
    "capitalizes every word in a sentence", "finds the second largest number in a list",
    "checks whether two strings are anagrams", "converts a Roman numeral to an integer",
    "converts an integer to binary", "computes the running sum of a list", "finds missing numbers in a range",
    "groups words by their first letter", "implements bubble sort", "implements a simple LRU cache",
    "finds the longest word in a sentence", "checks balanced parentheses", "counts the lines of a file",
    "computes the dot product of two vectors", "finds the intersection of two lists", "chunks a list into pieces",
]
MATH = [
    "A shop sells pencils at {a} cents each. How much do {b} pencils cost? Explain your steps.",
    "If a train travels {a} kilometres in {b} hours, what is its average speed?",
    "What is {a} multiplied by {b}? Show the working.", "What is {a} plus {b} minus {c}?",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
    "Solve for x: {a}x + {b} = {c}.", "What is {a} percent of {b}?",
    "Tom has {a} apples and gives away {b}. Then he buys {c} more. How many does he have now?",
    "A recipe needs {a} grams of flour for {b} cookies. How much flour is needed for {c} cookies?",
    "Is {a} a prime number? Explain how you checked.", "What is the sum of the integers from 1 to {a}?",
    "A bank account pays {b} percent simple interest a year. How much interest does {a} dollars earn in {c} years?",
]
REASONING = [
    "If all {x} are {y} and some {y} are {z}, can we conclude that some {x} are {z}? Explain.",
    "Three friends, {n1}, {n2} and {n3}, finish a race. {n1} is not first, and {n3} finishes after {n2}. "
    "Who could have won? Explain your reasoning.",
    "{n1} is older than {n2}, and {n2} is older than {n3}. Who is the youngest? Explain.",
    "A box holds red and blue balls. There are {a} balls and {b} more red than blue. How many of each are there?",
    "What comes next in the sequence {a}, {s2}, {s3}, {s4}? Explain the pattern.",
]
EXTRACTION = [
    "Extract the names and ages from this text as JSON: \"{n1} is {a} years old, {n2} is {b} and {n3} just "
    "turned {c}.\"",
    "List the cities mentioned in this sentence: \"{n1} flew from {c1} to {c2}, then took a train to {c3}.\"",
    "Classify the sentiment of this review as positive, negative or neutral: \"{rev}\"",
    "Rewrite this sentence in a formal tone: \"{casual}\"", "Fix the grammar in this sentence: \"{bad}\"",
    "Summarize this in one sentence: \"{n1} planned {t} for weeks, but on the day it rained, so everyone "
    "stayed inside and played games instead, which turned out to be even more fun.\"",
]
NAMES = ["Alice", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam", "Maya",
         "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tara"]
CITIES = ["Paris", "Tokyo", "Lima", "Cairo", "Oslo", "Toronto", "Nairobi", "Madrid", "Seoul", "Sydney", "Berlin",
          "Mumbai", "Lisbon", "Denver"]
CLASSES = ["cats", "dogs", "birds", "mammals", "pets", "animals", "teachers", "musicians", "painters", "athletes",
           "students", "swimmers"]
REVIEWS = ["The soup was cold and the waiter ignored us.", "Great battery life and a bright screen, I love it.",
           "It arrived on time. It works.", "Terrible fit, I returned it the next day.",
           "The staff were friendly and the room was spotless.", "Not bad, not great, just average."]
CASUAL = ["hey, can u send me that file asap?", "gonna be late, traffic is nuts", "that movie was super cool lol",
          "we need more snacks for the meeting", "thx for the help yesterday!"]
BAD = ["Me and him goes to the store yesterday.", "She don't like apples no more.", "Their going to they're house.",
       "The datas is wrong.", "He have three brother."]


def topic_key(topic: str) -> int:
    return int.from_bytes(hashlib.sha256(topic.encode()).digest()[:4], "big")


def is_heldout_topic(topic: str, heldout_percent: int = 10) -> bool:
    """Stable topic split: the same topics are held out on every machine and every run."""
    return topic_key(topic) % 100 < heldout_percent


def _fill(rng: random.Random, template: str, t: str, others: list[str]) -> str:
    """One prompt from a template: ``t`` the topic, ``u`` another topic, the rest fresh numbers and names."""
    a, b, c = rng.randint(3, 97), rng.randint(2, 40), rng.randint(2, 60)
    step = rng.randint(2, 9)
    n1, n2, n3 = rng.sample(NAMES, 3)
    c1, c2, c3 = rng.sample(CITIES, 3)
    x, y, z = rng.sample(CLASSES, 3)
    return template.format(t=t, u=rng.choice(others), a=a, b=b, c=c, n1=n1, n2=n2, n3=n3, c1=c1, c2=c2, c3=c3,
                           x=x, y=y, z=z, s2=a + step, s3=a + 2 * step, s4=a + 3 * step, rev=rng.choice(REVIEWS),
                           casual=rng.choice(CASUAL), bad=rng.choice(BAD))


def chat_prompts(*, heldout: bool = False, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Unique single-turn chat prompts ``{id, category, topic, prompt}``, shuffled with ``seed``; ``heldout``
    picks the held-out topics' prompts instead of the training ones. ``n`` caps the count (None = all)."""
    rng = random.Random(seed)
    families: list[tuple[str, list[str], list[str]]] = [
        ("writing", WRITING, TOPICS["stem"] + TOPICS["humanities"] + TOPICS["everyday"]),
        ("stem", EXPLAIN, TOPICS["stem"]),
        ("humanities", EXPLAIN, TOPICS["humanities"]),
        ("advice", ADVICE, TOPICS["everyday"]),
        ("roleplay", ROLEPLAY, TOPICS["stem"] + TOPICS["humanities"] + TOPICS["everyday"]),
        ("coding", CODING, CODE_TASKS),
    ]
    seen: set[str] = set()
    out: list[dict[str, Any]] = []

    def add(category: str, topic: str, text: str) -> None:
        if text not in seen and is_heldout_topic(topic) == heldout:
            seen.add(text)
            out.append({"category": category, "topic": topic, "prompt": text})

    for category, templates, topics in families:
        for topic in topics:
            same_kind = [u for u in topics if u != topic and is_heldout_topic(u) == heldout] or [topic]
            for template in templates:
                add(category, topic, _fill(rng, template, topic, same_kind))
    # Arithmetic, logic and extraction: the "topic" is the template, drawn with fresh numbers and names.
    for category, templates, repeats in (("math", MATH, 12), ("reasoning", REASONING, 10),
                                         ("extraction", EXTRACTION, 8)):
        for i, template in enumerate(templates):
            topic = f"{category}-{i}"
            for _ in range(repeats):
                add(category, topic, _fill(rng, template, rng.choice(TOPICS["everyday"]), TOPICS["everyday"]))
    rng.shuffle(out)
    out = out[:n] if n is not None else out
    return [{"id": f"{'heldout' if heldout else 'train'}-{i}", **p} for i, p in enumerate(out)]


def write_jsonl(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> Path:
    """One JSON object per line (UTF-8), parent directories created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path
