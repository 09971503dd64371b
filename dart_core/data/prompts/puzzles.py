"""Numbers-and-facts families of the distillation prompt set (:mod:`dart_core.data.prompts.chat_set`): math with
concrete, consistent numbers (every problem has a clean answer), logic puzzles, and extraction tasks over generated
passages (emails, reviews, meeting notes, product specs, news). Each generator yields ``(topic, prompt)``; the topic
is the template or passage subject, the unit of the held-out split."""

from __future__ import annotations

import random
from collections.abc import Iterator

from dart_core.data.prompts.words import (
    BUSINESS,
    COMPANIES,
    JOBS,
    MONTHS,
    NAMES,
    PLACES,
    PRODUCTS,
    SURNAMES,
    WEEKDAYS,
    word_list,
)

TRIPLES = [(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (9, 40, 41)]
ITEMS = ["notebooks", "apples", "concert tickets", "bus passes", "pencils", "coffees", "plant pots", "T-shirts",
         "movie tickets", "loaves of bread", "paintbrushes", "phone cases"]


def _values(rng: random.Random) -> dict[str, object]:
    """One coherent set of numbers: every derived value is computed, so each problem has an exact answer."""
    r = rng.randint
    price = r(1, 40) + rng.choice([0, 0.25, 0.5, 0.75, 0.99])
    qty = r(2, 15)
    total = round(price * qty, 2)
    m, x0, q = r(2, 12), r(-10, 20), r(1, 50)
    r1, r2 = rng.sample([i for i in range(-9, 10) if i], 2)
    b_, c_ = -(r1 + r2), r1 * r2
    y0 = r(-8, 15)
    leg = rng.choice(TRIPLES)
    s = r(1, 4)
    v1, v2, t = r(40, 90), r(40, 90), r(2, 5)
    h1 = rng.choice([2, 3, 4, 6])
    h2 = rng.choice([3, 4, 6, 12])
    start, step, ratio = r(1, 30), r(2, 12), r(2, 4)
    data = sorted(r(1, 60) for _ in range(rng.choice([5, 7])))
    older, later = r(8, 30), r(1, 7)
    den1, den2 = rng.choice([3, 4, 5, 6, 8]), rng.choice([3, 4, 5, 6, 8, 10])
    return {
        "a": r(12, 480), "b": r(2, 40), "c": r(2, 60), "k": r(3, 12), "n": r(10, 60), "big": r(1000, 9999),
        "big2": r(1000, 9999), "p": rng.choice([5, 8, 10, 12, 15, 20, 25, 30, 35, 40, 60, 75]),
        "item": rng.choice(ITEMS), "price": f"{price:.2f}", "qty": qty, "pay": (int(total) // 20 + 1) * 20,
        "name": rng.choice(NAMES), "name2": rng.choice(NAMES), "m": m, "q": q, "mx": m * x0 + q,
        "mxq": m * (x0 - q), "sx": x0 + y0, "dx": x0 - y0, "lin2": 2 * x0 + 3 * y0,
        "quad": f"x^2 {'+' if b_ >= 0 else '-'} {abs(b_)}x {'+' if c_ >= 0 else '-'} {abs(c_)} = 0",
        "leg1": leg[0] * s, "leg2": leg[1] * s, "hyp": leg[2] * s, "radius": r(2, 30), "v1": v1, "v2": v2, "t": t,
        "dist": (v1 + v2) * t, "h1": h1, "h2": h2, "seq": ", ".join(str(start + i * step) for i in range(4)),
        "gseq": ", ".join(str(start * ratio**i) for i in range(4)), "nth": r(10, 50),
        "data": ", ".join(map(str, rng.sample(data, len(data)))), "older": older + later, "later": later,
        "km": r(5, 420), "kg": r(2, 120), "celsius": r(-20, 45), "litres": r(2, 80), "minutes": r(75, 900),
        "feet": r(3, 30), "g1": r(12, 96), "g2": r(12, 96), "num1": r(1, den1 - 1), "den1": den1,
        "num2": r(1, den2 - 1), "den2": den2, "red": r(2, 9), "blue": r(2, 9), "green": r(1, 6), "hour": r(1, 12),
        "minute": rng.choice([0, 15, 20, 30, 45]), "sides": rng.choice([5, 6, 8, 10, 12]),
        "year": rng.choice([2, 3, 5, 10]), "mph": r(20, 75), "w": r(3, 25), "l": r(4, 40), "hgt": r(2, 20),
        "month": rng.choice(MONTHS), "city": rng.choice(PLACES),
    }


MATH = {
    "shop-change": "I buy {qty} {item} at ${price} each and pay with ${pay}. How much change should I get?",
    "percent-of": "What is {p}% of {big}?",
    "discount": "A jacket costs ${a} and is on sale at {p}% off. What is the sale price?",
    "tax": "A meal costs ${a} before a {p}% service charge. What is the total?",
    "tip": "Our restaurant bill is ${a} and we want to leave a {p}% tip, split equally among {k} people. How much "
           "does each person pay in total?",
    "percent-change": "A town's population grew from {big} to {big2}. What is the percentage change?",
    "simple-interest": "How much simple interest does ${big} earn at {k}% a year over {year} years?",
    "compound-interest": "If I invest ${big} at {k}% interest compounded yearly, how much will I have after {year} "
                         "years?",
    "speed": "A cyclist rides {km} km in {t} hours. What is the average speed in km/h?",
    "meeting-trains": "Two trains start {dist} km apart and travel towards each other at {v1} km/h and {v2} km/h. "
                      "After how long do they meet?",
    "work-rate": "One pump fills a tank in {h1} hours and another fills it in {h2} hours. How long do they take "
                 "together?",
    "recipe-scale": "A recipe for {k} people needs {a} g of flour and {b} g of butter. How much of each do I need "
                    "for {c} people?",
    "ratio-share": "{name} and {name2} share ${big} in the ratio {num1}:{den1}. How much does each get?",
    "average": "What are the mean, median and range of these numbers: {data}?",
    "mode-median": "My test scores this term were {data}. What is my average score, and what is the median?",
    "multiply": "What is {a} times {big}? Show the long multiplication.",
    "divide": "Divide {big} by {k}. What are the quotient and the remainder?",
    "order-ops": "Evaluate {a} + {b} × {c} - {k}² and explain the order of operations.",
    "fractions-add": "What is {num1}/{den1} + {num2}/{den2}? Give the answer in lowest terms.",
    "fractions-mul": "Multiply {num1}/{den1} by {num2}/{den2} and simplify.",
    "decimal-fraction": "Write {num1}/{den2} as a decimal and as a percentage.",
    "linear": "Solve for x: {m}x + {q} = {mx}.",
    "bracket-equation": "Solve {m}(x - {q}) = {mxq} and check your answer.",
    "system": "Solve the system of equations x + y = {sx} and x - y = {dx}.",
    "system-2": "Find x and y if x + y = {sx} and 2x + 3y = {lin2}.",
    "quadratic": "Solve the quadratic equation {quad}.",
    "factorise": "Factorise {quad} and use it to find the roots.",
    "pythagoras": "A right triangle has legs of {leg1} cm and {leg2} cm. How long is the hypotenuse?",
    "ladder": "A {hyp} m ladder leans against a wall with its foot {leg1} m from the wall. How high up the wall "
              "does it reach?",
    "circle": "What are the area and circumference of a circle with radius {radius} cm?",
    "rectangle": "A rectangular garden is {l} m long and {w} m wide. What are its area and perimeter, and how much "
                 "fencing is needed to go around it?",
    "triangle-area": "Find the area of a triangle with base {l} cm and height {hgt} cm.",
    "cylinder": "What is the volume of a cylinder with radius {w} cm and height {hgt} cm?",
    "box": "A box measures {l} cm by {w} cm by {hgt} cm. What is its volume and its surface area?",
    "polygon-angles": "What is the sum of the interior angles of a polygon with {sides} sides, and how big is each "
                      "angle if it is regular?",
    "triangle-angle": "Two angles of a triangle are {g1}° and {g2}°. Is that possible? If so, what is the third "
                      "angle?",
    "km-miles": "Convert {km} kilometres to miles.",
    "kg-lb": "How many pounds is {kg} kg?",
    "celsius": "What is {celsius} °C in Fahrenheit?",
    "litres-gallons": "How many US gallons are {litres} litres?",
    "minutes-hours": "How many hours and minutes are {minutes} minutes?",
    "feet-metres": "Convert {feet} feet to metres.",
    "mph-kmh": "A car drives at {mph} mph. What is that in km/h?",
    "arith-seq": "What is the {nth}th term of the sequence {seq}, ...? Find a formula.",
    "arith-sum": "Find the sum of the first {nth} terms of the sequence {seq}, ...",
    "geo-seq": "What are the next two terms of {gseq}, ...? What is the general rule?",
    "sum-to-n": "What is the sum of all whole numbers from 1 to {a}?",
    "gcd-lcm": "Find the greatest common divisor and the least common multiple of {g1} and {g2}.",
    "prime-factors": "Write {big} as a product of prime factors.",
    "is-prime": "Is {a} a prime number? Show how you checked.",
    "marbles": "A bag has {red} red, {blue} blue and {green} green marbles. If I pick one at random, what is the "
               "probability it is not blue?",
    "two-marbles": "A bag holds {red} red and {blue} blue marbles. I draw two without replacement. What is the "
                   "probability both are red?",
    "dice": "I roll two fair dice. What is the probability that the total is {k}?",
    "clock-angle": "What is the angle between the hour and minute hands at {hour}:{minute:02d}?",
    "ages": "{name} is {older} years older than {name2}. In {later} years {name} will be twice as old as {name2}. How "
            "old are they now?",
    "savings": "{name} saves ${b} a week. How many weeks until {name} can afford a ${big} laptop?",
    "fuel": "My car uses {k} litres of fuel per 100 km. How much fuel do I need for a {km} km trip, and what does "
            "it cost at ${price} per litre?",
    "paint": "A wall is {l} m wide and {hgt} m high. One litre of paint covers {k} square metres. How many litres "
             "do I need for two coats?",
    "pages": "{name} reads {b} pages a day. How many days does a {a}-page book take?",
    "combinations": "In how many ways can a committee of {k} be chosen from {n} people?",
    "permutations": "How many different {k}-letter codes can be made from the 26 letters if no letter repeats?",
}

REASONING = {
    "order-3": "{n1} is taller than {n2}, and {n3} is shorter than {n2}. Who is the tallest, and who is the "
               "shortest?",
    "order-4": "{n1} finished a race before {n2}, {n2} finished before {n3}, and {n4} finished after {n1} but before "
               "{n2}. What was the finishing order?",
    "seating": "{n1}, {n2}, {n3} and {n4} sit in a row of four chairs. {n1} is at the left end, {n2} sits next to "
               "{n1}, and {n4} is not next to {n2}. Where does everyone sit?",
    "syllogism": "Every {job} at {company} speaks Spanish. {n1} works at {company} as a {job}. Does {n1} speak "
                 "Spanish? What could we say if {n1} were not a {job}?",
    "some-all": "Some runners at {company} are {job}s, and everyone at {company} who runs gets a free gym pass. "
                "Does it follow that some {job}s get a free gym pass? Explain.",
    "liar": "{n1} says \"{n2} is lying.\" {n2} says \"{n3} is lying.\" {n3} says \"{n1} and {n2} are both "
            "lying.\" Who is telling the truth?",
    "knights": "On an island, knights always tell the truth and knaves always lie. {n1} says: \"{n2} and I are both "
               "knaves.\" What are {n1} and {n2}?",
    "weekday": "If today is {wd}, what day of the week will it be in {n} days?",
    "handshakes": "At a party of {n} people, everyone shakes hands with everyone else exactly once. How many "
                  "handshakes are there?",
    "socks": "A drawer holds {red} black socks and {blue} white socks. In the dark, how many must I take out to be "
             "sure of a matching pair? And to be sure of a black pair?",
    "schedule": "{n1} can meet only on {wd} or {wd2}. {n2} cannot meet on {wd}. {n3} is free every day except "
                "{wd3}. On which day can all three meet?",
    "coins": "I have {coins} identical-looking coins and one of them is heavier. With a balance scale, what is the "
             "smallest number of weighings that always finds the heavy coin?",
    "jugs": "I have a {j1}-litre jug, a {j2}-litre jug and a tap. How can I measure exactly {j3} litres?",
    "boxes": "Three boxes are labelled \"{f1}\", \"{f2}\" and \"{f1} and {f2}\", and every label is wrong. I may "
             "take one fruit from one box without looking inside. How can I relabel all three boxes correctly?",
    "birthday": "{n1}, {n2} and {n3} were born in {m1}, {m2} and {m3}, one in each month. {n1} was not born in {m1}, "
                "and {n2} was born in {m2}. Who was born in which month?",
    "modus-tollens": "If {n1} misses the {time} bus, {n1} is late for work. Today {n1} was on time. What can we "
                     "conclude, and which rule of logic did you use?",
    "affirming": "Everyone who passed the {job} exam studied for it. {n1} studied for it. Did {n1} pass?",
    "bat-ball": "A notebook and a pen cost ${bb_total} together. The notebook costs ${bb_diff} more than the pen. How "
                "much does the pen cost?",
    "machines": "If {k} machines make {k} widgets in {k} minutes, how long do {n} machines take to make {n} widgets?",
    "doubling": "Algae on a pond double in area every day and cover the whole pond on day {n}. On which day did "
                "they cover half of it?",
    "siblings": "{n1} is a boy with {k} sisters, and each of his sisters has exactly one brother. How many children "
                "are in the family?",
    "month-days": "If the {d1}th of a month is a {wd}, what day of the week is the {d2}th of the same month?",
    "overtake": "In a race I overtake the runner in {place} place. What place am I in now?",
    "pigeonhole": "In a class of {n} pupils, must at least two share a birthday month? How many pupils guarantee "
                  "three sharing one?",
    "ranking": "{n1} has more books than {n2} but fewer than {n3}, and {n4} has more than {n3}. Rank them from most "
               "to fewest books.",
    "brick": "A brick weighs {k} kg plus half a brick. How much does one brick weigh?",
    "hanoi": "What is the smallest number of moves that solves the Tower of Hanoi with {k} discs? Explain the pattern.",
    "directions": "I walk {red}00 m north, then {blue}00 m east, then {red}00 m south. How far am I from my start, "
                  "and in which direction?",
    "cards": "Four cards show A, K, {c1} and {c2}. The rule is: if a card has a vowel on one side, it has an even "
             "number on the other. Which cards must I turn over to test the rule?",
}
FERMI = word_list("""
piano tuners work in a city of one million people; litres of water a person drinks in a lifetime; tennis balls would
fit in a school bus; words a person speaks in a year; trees there are in a large city park; cups of coffee are sold in
a big city each day; hairs are on a human head; books a public library holds; steps a postal worker walks in a year;
pizzas are eaten in a country of 50 million people each week; heartbeats happen in a lifetime; grains of rice are in
a one-kilogram bag; bicycles there are in Amsterdam; emails an office worker receives in a year; seats there are in
all the cinemas of a big city; bricks build a house; petrol stations a country of 10 million people needs; photos are
taken worldwide every day; golf balls fit in a swimming pool; teachers work in a city of 500,000 people
""")
ARGUMENTS = word_list("""
My grandfather smoked every day and lived to 95, so smoking can't be that bad.; Everyone in my class has a phone, so
every teenager in the country must have one.; If we let students redo one test, soon they will want to redo every exam
and grades will mean nothing.; This diet must work: thousands of people on social media say it changed their lives.;
Since the new manager arrived, sales went up, so the manager caused the increase.; You can't trust her opinion on
climate policy because she drives a car.; Either we ban cars from the city centre or we accept polluted air forever.;
The product is popular, so it must be the best one.; Nobody has proven that the old bridge is unsafe, so it must be
safe.; Ice cream sales and drownings both rise in summer, so ice cream causes drowning.; He failed his driving test
twice, so he will never be a good driver.; A famous actor recommends this vitamin, so it must be healthy.; We've
always done it this way, so it is the right way.; I flipped a coin five times and got heads each time, so tails is due
next.; If the plan were a bad idea, someone would have stopped it by now.
""")
DILEMMAS = word_list("""
renting in the city centre or buying a house in the suburbs; a higher-paid job with a long commute or a lower-paid job
close to home; learning Spanish or learning to code in my free time; a gap year or going straight to university;
buying a new laptop now or waiting six months; an electric car or a hybrid; a big wedding or a small one with a longer
honeymoon; adopting a puppy or an older dog; a four-day work week with longer days or five shorter days; paying off my
student loan early or investing the money; taking a job at a startup or at a large company; moving abroad for a year
or staying near family; a gym membership or exercising at home; a fixed-rate or a variable-rate mortgage; learning
piano or guitar as an adult beginner
""")
ODD_ONE_OUT = word_list("""
apple, pear, banana, carrot; violin, cello, trumpet, viola; Mars, Venus, Moon, Jupiter; oak, pine, tulip, birch;
square, circle, triangle, cube; copper, iron, plastic, silver; shark, dolphin, whale, seal; Python, Java, Linux, Rust;
Paris, Rome, Madrid, Sydney; 2, 3, 9, 11; 16, 25, 36, 50; run, swim, blue, jump; rose, daisy, lily, fern; kilometre,
metre, litre, centimetre; hammer, saw, screwdriver, paint
""")
ANALOGIES = word_list("""
bird : nest :: bee : ?; doctor : hospital :: teacher : ?; hot : cold :: day : ?; page : book :: brick : ?; glove :
hand :: sock : ?; writer : pen :: painter : ?; puppy : dog :: kitten : ?; fish : water :: bird : ?; thermometer :
temperature :: scale : ?; seed : tree :: egg : ?; chapter : novel :: episode : ?; key : lock :: password : ?
""")
CORRELATIONS = word_list("""
Towns with more fire stations have more fires.; Students who eat breakfast get better grades.; People who own a piano
earn more on average.; Cities with more ice cream shops have more sunburn cases.; Countries that drink more coffee win
more Nobel prizes.; Children with bigger shoe sizes read better.; Hospitals with more doctors have more deaths.;
People who sleep with the light on are more often short-sighted.; Cafés with free Wi-Fi have more customers.;
Employees who take more holidays are more productive.
""")

REASONING_ASK = ["", " Explain your reasoning.", " Think it through step by step.", " Show how you got the answer.",
                 " Keep the explanation short."]


def math_prompts(rng: random.Random, per_template: int) -> Iterator[tuple[str, str]]:
    for key, template in MATH.items():
        for _ in range(per_template):
            text = template.format(**_values(rng))
            yield f"math:{key}", text + rng.choice(["", "", " Show your working.", " Explain each step.",
                                                     " Give the final answer first, then the steps.",
                                                     " Check your answer at the end."])


def reasoning_prompts(rng: random.Random, per_template: int) -> Iterator[tuple[str, str]]:
    for key, template in REASONING.items():
        for _ in range(per_template):
            n1, n2, n3, n4 = rng.sample(NAMES, 4)
            wd, wd2, wd3 = rng.sample(WEEKDAYS, 3)
            m1, m2, m3 = rng.sample(MONTHS, 3)
            j1, j2 = rng.choice([(3, 5), (4, 7), (5, 7), (3, 7), (5, 8), (4, 9), (7, 10), (3, 8)])
            f1, f2 = rng.sample(["apples", "oranges", "pears", "lemons", "plums", "limes"], 2)
            v = _values(rng)
            pen, diff = rng.randint(5, 400) / 100, rng.randint(1, 20)
            d1, w = rng.randint(1, 9), rng.randint(1, 2)
            text = template.format(n1=n1, n2=n2, n3=n3, n4=n4, wd=wd, wd2=wd2, wd3=wd3, m1=m1, m2=m2, m3=m3, j1=j1,
                                   j2=j2, j3=rng.choice([x for x in range(1, j2) if x != j1]), f1=f1, f2=f2,
                                   job=rng.choice(JOBS), company=rng.choice(COMPANIES), k=v["k"], n=v["n"],
                                   red=v["red"], blue=v["blue"], coins=rng.choice([3, 8, 9, 12, 20, 27, 30, 81]),
                                   time=f"{rng.randint(6, 9)}:{rng.choice(['05', '20', '35', '50'])}",
                                   bb_total=f"{2 * pen + diff:.2f}", bb_diff=f"{diff:.2f}", d1=d1, d2=d1 + 7 * w,
                                   place=rng.choice(["second", "third", "fourth", "last"]),
                                   c1=rng.choice("2468"), c2=rng.choice("3579"))
            yield f"reasoning:{key}", text + rng.choice(REASONING_ASK)
    asks = {
        "fermi": (FERMI, ["Roughly how many {t}? Walk me through your estimate.",
                          "Make a Fermi estimate: how many {t}? State your assumptions.",
                          "Estimate how many {t}, and say which assumption matters most."]),
        "argument": (ARGUMENTS, ["What is wrong with this argument? \"{t}\"", "Is this reasoning sound? \"{t}\"",
                                 "Name the logical fallacy in: \"{t}\" and explain it.",
                                 "A friend says: \"{t}\" How would you respond politely?"]),
        "dilemma": (DILEMMAS, ["Help me decide between {t}. Lay out the trade-offs.",
                               "I'm torn between {t}. What questions should I ask myself?",
                               "Make a pros and cons table for {t}, then give a recommendation."]),
        "odd-one-out": (ODD_ONE_OUT, ["Which is the odd one out: {t}? Explain.",
                                      "Find the item that doesn't belong in this list and say why: {t}."]),
        "analogy": (ANALOGIES, ["Complete the analogy {t} Explain the relationship.",
                                "What word completes this analogy, and why? {t}"]),
        "correlation": (CORRELATIONS, ["\"{t}\" Does that mean one causes the other? What else could explain it?",
                                       "A news headline says: \"{t}\" How should I interpret it?"]),
    }
    for kind, (topics, templates) in asks.items():
        for t in topics:
            for template in templates:
                yield f"reasoning:{kind}:{t}", template.format(t=t) + rng.choice(REASONING_ASK[:3])


# ---- extraction: generated passages and tasks about them ----
EMAIL_SUBJECTS = word_list("""
rescheduling the quarterly review; the office move; a late invoice; the product launch; a team offsite; a new hire's
onboarding; the annual budget; a customer complaint; a website redesign; a conference trip; a software licence
renewal; the holiday rota; a delayed shipment; a charity fundraiser; a training workshop; a safety inspection; a
partnership proposal; the summer party; a server outage; an internship programme
""")
NEWS = word_list("""
a new cycling bridge; a library expansion; a solar farm; a tram line; a flood barrier; a public swimming pool; a free
school-meals programme; a recycling centre; a tech incubator; a music festival; a hospital wing; a ban on cars in the
old town; a tree-planting scheme; a youth sports centre; a night bus service; a harbour clean-up
""")
PROS = ["the battery easily lasts {k} days", "it feels solid and well made", "setup took under five minutes",
        "it is much quieter than my old one", "the price was fair for what you get", "customer service replied within "
        "an hour", "it looks great on my desk", "it is light enough to carry everywhere"]
CONS = ["the instructions were confusing", "it stopped working after {k} weeks", "the app keeps crashing",
        "it is louder than advertised", "delivery took {k} days", "the strap broke on the second day",
        "it is overpriced for the quality", "the colour looks different from the photos"]

USES = ["at home", "on my daily commute", "at work", "when I travel", "with my kids", "at weekends"]
VERDICTS = ["Overall I'm very happy with it and would buy it again.",
            "Overall it does the job, but I expected a bit more for the price.",
            "I'm sending it back and would not recommend it."]


def _passage(rng: random.Random, kind: str, subject: str) -> str:
    n1, n2, n3, n4 = rng.sample(NAMES, 4)
    s1, s2 = rng.sample(SURNAMES, 2)
    co = rng.choice(COMPANIES)
    v = _values(rng)
    day, month, wd = rng.randint(1, 28), rng.choice(MONTHS), rng.choice(WEEKDAYS)
    time = f"{rng.randint(8, 17)}:{rng.choice(['00', '15', '30', '45'])}"
    if kind == "email":
        return (f"Subject: {subject[0].upper() + subject[1:]}\n\nHi {n1},\n\nThanks for your note about {subject}. "
                f"Could we meet on {wd} {day} {month} at {time} in room {rng.randint(101, 420)}? {n3} from "
                f"{co} will join us. The budget we agreed is ${v['big']}, and I still need the final figures from "
                f"you by {rng.choice(WEEKDAYS)}. {rng.choice(SIGN_OFFS)}\n\nBest,\n{n2} {s2}\n{co}")
    if kind == "review":
        good = rng.sample(PROS, 2)
        bad = rng.sample(CONS, rng.choice([0, 1, 2]))
        stars = 5 - len(bad) * 2 + rng.choice([0, -1]) if bad else rng.choice([4, 5])
        body = (f"I bought {subject} in {month} for ${v['price']} and mostly use it {rng.choice(USES)}. "
                + " ".join(f"{s[0].upper() + s[1:]}." for s in good + bad) + " " + VERDICTS[len(bad)])
        return f"Review by {n1} {s1[0]}. ({max(stars, 1)}/5 stars): " + body.format(k=v["k"])
    if kind == "meeting":
        return (f"Meeting notes: {subject}, {wd} {day} {month}\nAttendees: {n1}, {n2}, {n3}, {n4}\n"
                f"- {n1} reported that costs are {rng.choice(['up', 'down'])} {v['p']}% since last quarter.\n"
                f"- {n2} proposed moving the deadline to {rng.randint(1, 28)} {rng.choice(MONTHS)}; agreed.\n"
                f"- Open question: whether to involve {co}.\n"
                f"- Action: {n3} to draft a plan by {rng.choice(WEEKDAYS)}; {n4} to book the next meeting.")
    if kind == "spec":
        return (f"{subject[0].upper() + subject[1:]} by {co}\nPrice: ${v['price']}\nWeight: {v['a']} g\n"
                f"Dimensions: {v['l']} x {v['w']} x {v['hgt']} cm\nBattery life: up to {v['b']} hours\n"
                f"Colours: {', '.join(rng.sample(['black', 'white', 'sage green', 'navy', 'coral', 'grey'], 3))}\n"
                f"Warranty: {rng.randint(1, 3)} years\nIn the box: the device, a USB-C cable, a quick-start guide")
    return (f"{v['city']}, {day} {month}: The city council voted {v['k'] + 8} to {v['k'] - 2} on {wd} to approve "
            f"{subject}, which will cost an estimated {v['c']} million euros and should open in {2026 + v['year']}. "
            f"Mayor {n1} {s1} called it \"a long overdue investment\". Critics, including local business owner "
            f"{n2} {s2}, say the money should go to housing instead. Work is due to start in {rng.choice(MONTHS)}.")


EXTRACT_TASKS = {
    "email": ["Extract the meeting date, time, room, budget and deadline as JSON.",
              "Who is mentioned in this email, and what is each person's role?",
              "Write a short, polite reply accepting the meeting.", "What does the sender need, and by when?"],
    "review": ["Is the sentiment of this review positive, negative or mixed? Quote the phrases that show it.",
               "Extract the product, price, star rating, pros and cons as JSON.",
               "List the pros and cons in a two-column table.", "Would this reviewer recommend the product? Why?"],
    "meeting": ["Turn these notes into a table of action items with owner and due day.",
                "What was decided, and what is still open?", "Write a short follow-up email to the attendees "
                "summarising the notes.", "Extract the attendees and their tasks as JSON."],
    "spec": ["Convert this spec into a Markdown table.", "Extract the specs as JSON with numeric values and units.",
             "Write a two-sentence product description from these specs.",
             "Is this a good choice for someone who travels a lot? Use the specs to justify your answer."],
    "news": ["List every person, organisation and place mentioned in the article.",
             "What are the main arguments for and against the project?",
             "Extract the vote, cost, opening year and people quoted as JSON.", "Write a headline for this article."],
}
COMMON_TASKS = ["Summarise the text in {k}0 words or fewer.", "Summarise this in one sentence.",
                "Rewrite it as three bullet points.", "List all the numbers in the text and what each refers to.",
                "What is the single most important fact in this text?"]
SIGN_OFFS = ["Let me know if that works.", "Sorry for the short notice.", "Thanks again for your patience."]
PASSAGE_NAMES = {"email": "an email", "review": "a customer review", "meeting": "my meeting notes",
                 "spec": "a product spec", "news": "a news item"}


def extraction_prompts(rng: random.Random, per_subject: int) -> Iterator[tuple[str, str]]:
    kinds = {"email": EMAIL_SUBJECTS, "review": PRODUCTS, "meeting": BUSINESS, "spec": PRODUCTS, "news": NEWS}
    for kind, subjects in kinds.items():
        for subject in subjects:
            for _ in range(per_subject):
                passage = _passage(rng, kind, subject)
                task = rng.choice(EXTRACT_TASKS[kind] * 3 + COMMON_TASKS).format(k=rng.randint(2, 6))
                layout = rng.randrange(4)
                if layout == 0:
                    text = f"{task}\n\n{passage}"
                elif layout == 1:
                    text = f"Here is {PASSAGE_NAMES[kind]}:\n\n\"\"\"\n{passage}\n\"\"\"\n\n{task}"
                elif layout == 2:
                    text = f"{passage}\n\n---\n{task}"
                else:
                    text = f"Read {PASSAGE_NAMES[kind]} below. {task}\n\nText:\n{passage}"
                yield f"extraction:{kind}:{subject}", text
