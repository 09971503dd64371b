"""The distillation prompt set: tens of thousands of seeded chat requests, a quarter of them two-turn.

The drafters learn the target's own answers, so what matters is breadth of *form*: prose, lists, tables, JSON, code
in ten languages (written, explained, fixed, tested), arithmetic with real numbers, dialogue and role-play, and
answers about a passage given in the prompt, each dressed with the modifiers users type (audience, length, tone,
format). Several hundred topics feed the templates (:mod:`~dart_core.data.prompts.words`, :mod:`~dart_core.train.
prompt_code`, :mod:`~dart_core.data.prompts.puzzles`). The held-out split is by *topic* (the stable hash of
:func:`~dart_core.data.prompts.topics.is_heldout_topic`), so no held-out topic, template family or snippet is seen in
training. Nothing is taken from a benchmark: a test checks that no prompt shares an 8-word run with MT-bench or with
the bundles' shipped ``prompts.jsonl``."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any

from dart_core.data.prompts.code import (
    CONCEPTS,
    ERRORS,
    FENCE,
    LANGUAGES,
    SNIPPETS,
    SQL_SCHEMA,
    SQL_TASKS,
    TASK_LANGUAGES,
    TASKS,
)
from dart_core.data.prompts.puzzles import extraction_prompts, math_prompts, reasoning_prompts
from dart_core.data.prompts.topics import is_heldout_topic, topic_key
from dart_core.data.prompts.words import (
    ARTS,
    BUSINESS,
    EVERYDAY,
    FOOD,
    HEALTH,
    HISTORY,
    JOBS,
    NAMES,
    PERSONAS,
    PLACES,
    PRODUCTS,
    SOCIETY,
    SPORTS,
    STEM,
    TECH,
)

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities", "advice")
FOLLOWUP_SHARE = 0.25  # records that carry a second user turn
FOLLOWUP_SHARE_LATER = 0.5  # the same in the rounds after the first: more second turns per new prompt

EXPLAIN = [
    "Explain {t} in simple terms.", "How does {t} work?", "What is {t}, and why does it matter?",
    "Can you give me a clear explanation of {t}?", "Give me five interesting facts about {t}.",
    "What are the most common misconceptions about {t}?", "Walk me through {t} step by step.",
    "Write a short quiz about {t}: four multiple-choice questions, answers at the end.",
    "Compare {t} and {u}. How are they similar, and how do they differ?",
    "Summarize the key ideas of {t} in one paragraph.", "Create a study guide on {t} with key terms and definitions.",
    "Explain {t} using an analogy from everyday life.", "I keep hearing about {t}. What is it, really?",
    "Write a glossary of five terms related to {t}.", "What would a good introductory lecture on {t} cover? Give an "
    "outline.", "Write the opening paragraph of an encyclopedia article on {t}.",
    "Why should a high-school student learn about {t}?", "Give a real-world example that shows {t} in action.",
    "Make a table with three columns (term, meaning, example) about {t}.",
    "Create six flashcards (question and answer) for revising {t}.",
    "What are three good questions for a class discussion about {t}?", "Explain {t} in the length of a tweet.",
    "Write an essay outline on {t}: an introduction, three main points and a conclusion.",
    "Describe {t} in exactly five sentences.", "What is the one thing everyone should understand about {t}?",
    "What is the connection between {t} and {u}?", "Teach me the basics of {t} as if I were twelve.",
    "Give me a one-paragraph explanation of {t}, then a harder follow-up question to test myself.",
]
EXPLAIN_STEM = [
    "What questions do scientists still have about {t}?", "How do researchers study {t}?",
    "What experiment could a student do at home to learn about {t}?", "What are the practical uses of {t}?",
    "What are the risks or downsides of {t}?", "How has our understanding of {t} changed over the last century?",
]
EXPLAIN_HUMANITIES = [
    "What is the history behind {t}?", "What are the main debates around {t}?",
    "List the key people, places or dates I should know about {t}.", "Why is {t} still talked about today?",
    "How would different cultures view {t}?", "What would be a good essay question about {t}, and how would you "
    "answer it?",
]
EXPLAIN_HISTORY = ["What caused {t}, and what were its consequences?", "Write a timeline of {t} with five entries.",
                   "What was daily life like for ordinary people during {t}?"]
ADVICE = [
    "Give me five tips for {t}.", "What does a beginner need to know about {t}?", "Make a checklist for {t}.",
    "What are common mistakes with {t}, and how do I avoid them?", "Plan a one-week schedule for {t}.",
    "I'm nervous about {t}. Any advice?", "How do I get started with {t}?",
    "What do I need to prepare for {t}? Keep it practical.", "What's a realistic budget for {t}?",
    "Give me a step-by-step plan for {t}.", "What are the pros and cons of {t}?",
    "Suggest a 30-day challenge around {t}.", "What questions should I ask myself before {t}?",
    "What are some low-cost ways to approach {t}?", "How do I stay motivated with {t}?",
    "I have only {k} minutes a day. How can I make progress with {t}?",
    "Compare two approaches to {t} and recommend one.", "What does a good first week of {t} look like?",
    "Tell me the three most important things about {t}, and why.", "Write a to-do list for {t}, ordered by priority.",
    "My friend {n} wants help with {t}. What should I tell them?", "What would an expert do differently with {t}?",
]
WRITING = [
    "Write a short story about {t}.", "Write a poem about {t}.", "Write a haiku about {t}.",
    "Write a limerick about {t}.", "Write a sonnet about {t}.", "Write a blog post introduction about {t}.",
    "Write a persuasive paragraph on why everyone should learn about {t}.",
    "Write a two-minute assembly speech for pupils about {t}.",
    "Write a diary entry by someone who discovers {t} for the first time.",
    "Draft a letter to the editor of a local paper about {t}.",
    "Write the opening paragraph of a mystery novel that involves {t}.",
    "Write song lyrics (a verse and a chorus) about {t}.",
    "Write a children's bedtime story that teaches something about {t}.", "Write a fable with a moral about {t}.",
    "Write a social media thread of five posts about {t}.", "Write a newsletter intro for a club interested in {t}.",
    "Write a podcast episode outline about {t}.", "Write three catchy titles for an article about {t}.",
    "Write a short dialogue between a skeptic and an enthusiast about {t}.",
    "Write a museum placard of about 80 words about {t}.", "Write a rap verse about {t}.",
    "Write a two-paragraph opinion piece about {t}.", "Write a review of an imaginary documentary about {t}.",
    "Write a short science-fiction scene in which {t} plays a key role.", "Write a free-verse poem about {t}.",
]
WRITING_TYPED = {
    "product": (PRODUCTS, ["Write a product description for {t}.", "Write an advert for {t} aimed at students.",
                           "Write a five-star and a two-star customer review of {t}.",
                           "Write a short FAQ for {t}.", "Write a launch announcement email for {t}.",
                           "Come up with five slogans for {t}."]),
    "job": (JOBS, ["Write a cover letter for a {t} position.", "Write a job advert for a {t}.",
                   "Write a LinkedIn summary for a {t} with five years of experience.",
                   "Write a resignation letter for a {t} who is leaving on good terms.",
                   "Write a thank-you email after an interview for a {t} role."]),
    "place": (PLACES, ["Write a travel blog post about a weekend in {t}.", "Write a postcard from {t} to a friend.",
                       "Write a short guide to {t} for first-time visitors.",
                       "Write a poem about arriving in {t} at night."]),
}
ROLEPLAY = [
    "Pretend you are {p}. Introduce yourself and describe a typical day.",
    "You are {p}. A visitor asks you about {t}. Answer in character.",
    "Act as {p} and give a short talk about {t} to a group of students.",
    "Let's role-play: you are {p} and I'm a new apprentice on my first day. Start by greeting me.",
    "Stay in character as {p} and write a letter home after a long week.",
    "Imagine you are {p} being interviewed on the radio. What do people misunderstand about your work?",
    "Write a dialogue between {p} and {p2} who are stuck in a lift together.", "You are {p}. Describe the best day "
    "of your career.", "I'll be a nervous first-time customer and you're {p}. Open the conversation.",
    "As {p}, give me three pieces of advice about {t}.",
    "You are {p}. Tell a short story about the strangest thing that ever happened to you.",
    "Speak as {p} and explain {t} using examples from your own world.",
    "Role-play {p} answering a complaint from a customer named {n}.",
    "You're {p}. Write a short profile of yourself for a community noticeboard.",
    "Be {p} for a moment: what would you say to someone who wants your job?",
    "Play {p} teaching a ten-year-old about {t}.", "Write a monologue for {p} who has just received surprising news.",
    "Act as {p}. I say: \"Good morning! What's new today?\" Reply in character.",
]
ROLEPLAY_TYPED = {
    "interview": (JOBS, ["Act as a job interviewer hiring a {t}. Ask me your first question and wait for my answer.",
                         "Pretend to interview me for a {t} job, then give me feedback on a typical weak answer."]),
    "travel": (PLACES, ["Be my travel agent and plan three days in {t} for me.",
                        "You're a local guide in {t}. I have one afternoon. Where do we go?"]),
}
CODE_WRITE = [
    "Write a {lang} function that {t}.", "Write a {lang} function that {t}, and explain how it works.",
    "How would I write a {lang} function that {t}? Show the code.", "Can you show me {lang} code that {t}?",
    "Write a {lang} function that {t}. Include a few example calls.", "I need a {lang} function that {t}. Please "
    "keep it simple and readable.", "Implement a function in {lang} that {t}, and state its time complexity.",
    "Write a well-commented {lang} function that {t}.", "Write unit tests in {lang} for a function that {t}.",
    "Write a function that {t}, in {lang}, and handle the edge cases.",
]
CODE_READ = [
    "Explain what this {lang} code does:\n\n{code}", "Can you walk me through this {lang} code line by line?\n\n{code}",
    "What is the time complexity of this code?\n\n{code}",
    "Review this {lang} code and suggest improvements.\n\n{code}",
    "Write unit tests for this {lang} code.\n\n{code}", "Add comments to this code to explain it.\n\n{code}",
    "Rewrite this {lang} code in {other}.\n\n{code}", "What edge cases could break this code?\n\n{code}",
    "{code}\nWhat does this do, and when would I use it?",
    "How could I make this {lang} code more idiomatic?\n\n{code}",
    "Give this code a better name and a docstring or comment that explains it.\n\n{code}",
]
CODE_FIX = [
    "This {lang} code should {does}, but it doesn't work right. What's the bug?\n\n{code}",
    "Fix the bug in this {lang} code. It is supposed to {does}.\n\n{code}",
    "My code is meant to {does}, but the output is wrong. Can you help?\n\n{code}",
    "{code}\nThis is supposed to {does}. Find the mistake and show the corrected code.",
]
CONCEPT_ASK = [
    "Explain {t} in {lang} with a short example.", "What is the point of {t} in {lang}, and when does it matter?",
    "I don't understand {t} in {lang}. Can you give me a simple explanation?",
    "What are common mistakes with {t} in {lang}?",
    "Give me an interview question about {t} in {lang}, with a model answer.",
]
CONCEPT_ASK_GENERAL = ["Explain {t} with a code example.", "What is {t}, and why does it matter in programming?",
                       "Explain {t} to a junior developer.", "What are the trade-offs of {t}?"]
ERROR_ASK = ["I get this error in {lang}: `{t}`. What does it mean and how do I fix it?",
             "What usually causes \"{t}\" in {lang}?", "Why would {lang} say `{t}`? Give an example that triggers it "
             "and the fix."]

MODIFIERS = {
    "length": ["Keep it under 100 words.", "Keep it under 150 words.", "Answer in two or three sentences.",
               "One paragraph is enough.", "Be thorough.", "Be brief.", "Keep it short."],
    "format": ["Use three bullet points.", "Answer as a numbered list.", "Put the answer in a table.",
               "Format the answer as JSON.", "Use short headings.", "End with a one-sentence summary.",
               "Use Markdown."],
    "audience": ["Explain it for a complete beginner.", "I'm a high-school student.", "Write for a busy manager.",
                 "Assume I already know the basics.", "Pitch it at a ten-year-old.", "I'm not a native speaker."],
    "tone": ["Use a formal tone.", "Keep the tone friendly and casual.", "Add a little humour.",
             "Sound enthusiastic.", "Be neutral and factual."],
    "process": ["Go step by step.", "Think it through step by step.", "Give examples."],
}
PREFIXES = ["Hi! ", "Quick question: ", "Hey, ", "I'm curious. ", "Can you help me? ", "Hello. ", "Please help: "]
FOLLOWUPS = {
    "writing": ["Can you make it shorter?", "Make it funnier.", "Rewrite it for a younger audience.",
                "Give it a title.", "Make the tone more formal.", "Now turn it into a poem.",
                "Translate your answer into French.", "Make it more vivid.", "Rewrite the opening so it hooks "
                "the reader faster.", "Write a second version in a completely different style."],
    "roleplay": ["Stay in character and tell me more.", "Continue the scene.", "Now reply as the other person.",
                 "What happens next?", "End the conversation politely, still in character.",
                 "Step out of character: what did you base that on?"],
    "reasoning": ["How can you be sure?", "Explain it again in fewer words.", "What if one of the statements were "
                  "false?", "Give me a similar puzzle to try.", "Can you check your answer another way?",
                  "Where do people usually go wrong with this?"],
    "math": ["What would change if the numbers were doubled?", "Can you check your answer another way?",
             "Explain the second step in more detail.", "Write a similar problem for me to practise.",
             "How would you explain this to a ten-year-old?", "Can you show it as a formula?",
             "Round the answer to one decimal place and explain why that is enough."],
    "coding": ["Can you add error handling?", "What is the time complexity?", "Write a few unit tests for it.",
               "Explain the code line by line.", "How would you make it faster?", "Can you make it shorter?",
               "Give an example of how to call it.", "What happens with empty input?"],
    "extraction": ["Now give the result as a table.", "Return only the JSON, with no explanation.",
                   "Which detail is the most important, and why?", "Translate the text into Spanish.",
                   "Summarise it in one sentence.", "Did you leave anything out? Check again."],
    "explain": ["Give an example.", "Explain the second point in more detail.", "Can you make it simpler?",
                "Summarise your answer in three bullet points.", "What is a common misconception about this?",
                "How does this relate to everyday life?", "Make a short quiz about it.", "Can you make it shorter?",
                "Translate your answer into Spanish.", "Why is that important?"],
    "advice": ["What if I only have 20 minutes a day?", "Put that into a weekly plan.", "Which tip matters most?",
               "Turn it into a checklist.", "What should I avoid?", "Can you make it shorter?",
               "What if my budget is very tight?", "How do I know if it's working?"],
}
Item = tuple[str, str, str, list[str]]  # category, topic, prompt, follow-up pool


def _dress(rng: random.Random, text: str, kinds: tuple[str, ...], p: float) -> str:
    """Vary the surface the way users do: an optional modifier or two, sometimes a greeting, sometimes lower case."""
    if rng.random() < p:
        fitting = [k for k in kinds if not (k == "process" and "step" in text)]  # no "step by step" twice
        for kind in rng.sample(fitting, 2 if rng.random() < 0.2 and len(fitting) > 1 else 1):
            text += " " + rng.choice(MODIFIERS[kind])
    if rng.random() < 0.08:
        prefix = rng.choice(PREFIXES)
        text = prefix + (text[0].lower() + text[1:] if prefix.endswith((", ", ": ")) else text)
    elif rng.random() < 0.05 and "\n" not in text:
        text = text.lower().rstrip(".?")
    return text


def _topic_prompts(rng: random.Random, category: str, topics: list[str], templates: list[str], per_topic: int,
                   kinds: tuple[str, ...], followups: str, p: float = 0.45) -> Iterator[Item]:
    for i, t in enumerate(topics):
        for template in rng.sample(templates, min(per_topic, len(templates))):
            u = topics[(i + rng.choice([-3, -2, -1, 1, 2, 3])) % len(topics)]  # a neighbour: the lists are grouped
            text = template.format(t=t, u=u, k=rng.choice([10, 15, 20, 30]), n=rng.choice(NAMES))
            yield category, t, _dress(rng, text, kinds, p), FOLLOWUPS[followups]


def _prose(rng: random.Random) -> Iterator[Item]:
    explain_kinds = ("length", "format", "audience", "tone", "process")
    yield from _topic_prompts(rng, "stem", STEM + TECH + HEALTH, EXPLAIN + EXPLAIN_STEM, 15, explain_kinds, "explain")
    yield from _topic_prompts(rng, "humanities", HISTORY, EXPLAIN + EXPLAIN_HUMANITIES + EXPLAIN_HISTORY, 17,
                              explain_kinds, "explain")
    yield from _topic_prompts(rng, "humanities", SOCIETY + ARTS + SPORTS + FOOD, EXPLAIN + EXPLAIN_HUMANITIES, 15,
                              explain_kinds, "explain")
    yield from _topic_prompts(rng, "advice", EVERYDAY + BUSINESS, ADVICE, 19, ("length", "format", "tone"), "advice")
    subjects = STEM + TECH + HISTORY + SOCIETY + ARTS + SPORTS + FOOD + EVERYDAY
    yield from _topic_prompts(rng, "writing", subjects, WRITING, 6, ("length", "tone"), "writing", 0.3)
    for topics, templates in WRITING_TYPED.values():
        yield from _topic_prompts(rng, "writing", topics, templates, 5, ("length", "tone"), "writing", 0.3)
    for p in PERSONAS:
        others = [q for q in PERSONAS if q != p]
        for template in rng.sample(ROLEPLAY, 16):
            text = template.format(p=p, p2=rng.choice(others), t=rng.choice(subjects), n=rng.choice(NAMES))
            yield "roleplay", p, _dress(rng, text, ("length", "tone"), 0.2), FOLLOWUPS["roleplay"]
    for topics, templates in ROLEPLAY_TYPED.values():
        yield from _topic_prompts(rng, "roleplay", topics, templates, 2, ("length", "tone"), "roleplay", 0.2)


def _base_form(does: str) -> str:
    """"counts the words" -> "count the words": a snippet's description after "should" or "supposed to"."""
    verb, _, rest = does.partition(" ")
    if verb.endswith("ies"):
        verb = verb[:-3] + "y"
    elif verb.endswith(("ches", "shes", "xes", "sses")):
        verb = verb[:-2]
    elif verb.endswith("s"):
        verb = verb[:-1]
    return f"{verb} {rest}"


def _fenced(language: str, code: str) -> str:
    return f"```{FENCE[language]}\n{code}```"


def _code(rng: random.Random) -> Iterator[Item]:
    follow = FOLLOWUPS["coding"]
    for task in TASKS:
        pairs = [(lang, template) for lang in TASK_LANGUAGES for template in CODE_WRITE]
        for language, template in rng.sample(pairs, 18):
            others = [f"Now write it in {o}." for o in TASK_LANGUAGES if o != language]
            text = template.format(lang=language, t=task)
            yield "coding", task, _dress(rng, text, ("length",), 0.1), [*follow, *rng.sample(others, 2)]
    for s in SNIPPETS:
        other = rng.choice([x for x in LANGUAGES if x not in (s.language, "SQL", "Bash")])
        for template in CODE_READ:
            text = template.format(lang=s.language, other=other, code=_fenced(s.language, s.code))
            yield "coding", f"snippet:{s.name}", text, follow
        old, new = s.bug
        buggy = _fenced(s.language, s.code.replace(old, new, 1))
        for template in CODE_FIX:
            text = template.format(lang=s.language, does=_base_form(s.does), code=buggy)
            yield "coding", f"snippet:{s.name}", text, follow
    for concept, language in CONCEPTS:
        templates = [t.replace("{lang}", language) for t in CONCEPT_ASK] if language else CONCEPT_ASK_GENERAL
        for template in templates:
            text = _dress(rng, template.format(t=concept, lang=language), ("length", "audience"), 0.3)
            yield "coding", f"concept:{concept}:{language}", text, follow
    for error, language in ERRORS:
        for template in ERROR_ASK:
            yield "coding", f"error:{error}", template.format(t=error, lang=language), follow
    for task in SQL_TASKS:
        for template in ["Given the tables {s}, write a SQL query that {t}.",
                         "Write a SQL query that {t}. The schema is: {s}.",
                         "Tables: {s}. I need a query that {t}. Please explain each clause."]:
            yield "coding", f"sql:{task}", template.format(s=SQL_SCHEMA, t=task), follow


@functools.lru_cache(maxsize=8)
def _all(seed: int | str) -> tuple[Item, ...]:
    """Every prompt one round of the generator draws with ``seed``, in order. Kept: a recipe run asks for the same
    rounds several times (its training prompts, the held-out ones, the set's size) and each takes seconds."""
    rng = random.Random(seed)
    items = list(_prose(rng)) + list(_code(rng))
    items += [("math", t, p, FOLLOWUPS["math"]) for t, p in math_prompts(rng, 55)]
    items += [("reasoning", t, p, FOLLOWUPS["reasoning"]) for t, p in reasoning_prompts(rng, 80)]
    items += [("extraction", t, p, FOLLOWUPS["extraction"]) for t, p in extraction_prompts(rng, 16)]
    return tuple(items)


def chat_set(*, heldout: bool = False, seed: int = 0, n: int | None = None, rounds: int = 1) -> list[dict[str, Any]]:
    """Unique chat prompts ``{id, category, topic, prompt}``, about a quarter with ``followups`` (one more user turn,
    sent after the target's own first answer), shuffled with ``seed``. ``heldout`` picks the held-out topics' prompts
    instead of the training ones (the split does not depend on ``seed``); ``n`` caps the count (None = all).

    ``rounds`` > 1 appends more rounds of the generator, each drawn with its own seed (new numbers, passages,
    puzzles, template draws, neighbours and modifiers over the same topics), keeping only prompts no earlier round
    holds, half of them two-turn. Each round is shuffled on its own and numbered on from the last, so the first round
    (and the data answered for it) stays what it was whatever ``rounds`` is."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        out += _round(seed, r, heldout, seen)
        if n is not None and len(out) >= n:
            break
    out = out[:n] if n is not None else out
    return [{"id": f"{'heldout' if heldout else 'train'}-{i}", **r} for i, r in enumerate(out)]


def _round(seed: int, r: int, heldout: bool, seen: set[str]) -> list[dict[str, Any]]:
    """One round of the generator: its prompts that ``seen`` does not hold yet (added to it), shuffled."""
    rng = random.Random(f"chat_set:{seed}" if r == 0 else f"chat_set:{seed}:round{r}")
    share = FOLLOWUP_SHARE if r == 0 else FOLLOWUP_SHARE_LATER
    out: list[dict[str, Any]] = []
    for category, topic, prompt, pool in _all(seed if r == 0 else f"{seed}:round{r}"):
        followup = rng.choice(pool) if rng.random() < share else None  # drawn for every item: stable
        if prompt in seen or is_heldout_topic(topic) != heldout:
            continue
        seen.add(prompt)
        record: dict[str, Any] = {"category": category, "topic": topic, "prompt": prompt}
        if followup is not None:
            record["followups"] = [followup]
        out.append(record)
    rng.shuffle(out)
    return out


def heldout_roles(records: list[dict[str, Any]], *, n_eval: int, n_bench: int
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The held-out prompts in two roles, disjoint by topic: ``eval`` (the first ``n_eval`` of two thirds of the
    topics: their answers are the held-out loss that stops training) and ``bench`` (``n_bench`` prompts of the other
    third, taken in turn from each category: the bundle's benchmark prompts, so no figure is measured on a topic
    that chose the weights)."""
    eval_set = [r for r in records if (topic_key(r["topic"]) // 100) % 3 != 0][:n_eval]
    by_category: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if (topic_key(r["topic"]) // 100) % 3 == 0:
            by_category.setdefault(r["category"], []).append(r)
    bench: list[dict[str, Any]] = []
    queues = [iter(v) for _, v in sorted(by_category.items())]
    while len(bench) < n_bench and queues:
        for q in list(queues):
            r = next(q, None)
            if r is None:
                queues.remove(q)
            elif len(bench) < n_bench:
                bench.append(r)
    return eval_set, bench
