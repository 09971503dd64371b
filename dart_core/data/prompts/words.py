"""Word lists for the distillation prompt set (:mod:`dart_core.data.prompts.chat_set`): topics by domain, personas,
products, places and the names and numbers that fill passages. Data only; every entry is a held-out unit (the split
is by topic), so the lists are long to keep both splits broad."""

from __future__ import annotations


def word_list(text: str, sep: str = ";") -> list[str]:
    """Entries of a ``sep``-separated block, whitespace (line breaks included) collapsed."""
    return [" ".join(w.split()) for w in text.split(sep) if w.strip()]


# Subjects a user asks to have explained (noun phrases).
STEM = word_list("""
photosynthesis; black holes; the water cycle; plate tectonics; vaccines; the immune system; DNA replication; electric
circuits; magnetism; the speed of light; nuclear fusion; nuclear fission; solar panels; volcanoes; earthquakes; the
phases of the moon; ocean tides; rainbows; antibiotics; the human heart; neurons; lithium-ion batteries;
semiconductors; the periodic table; covalent bonds; natural selection; food webs; coral reefs; the greenhouse effect;
gravity; friction; sound waves; the Doppler effect; entropy; the carbon cycle; the nitrogen cycle; cell division;
mitochondria; the kidneys; the lungs; hormones; the placebo effect; viruses; bacteria; fungi; the Big Bang;
exoplanets; neutron stars; comets; Mars; Jupiter's moons; the solar wind; auroras; weather fronts; hurricanes;
glaciers; soil erosion; pollination; radioactivity; lasers; 3D printing; electric motors; hydroelectric power; wind
turbines; geothermal energy; acids and bases; catalysts; osmosis; buoyancy; air pressure; thermal expansion;
refraction of light; the electromagnetic spectrum; X-rays; MRI scanners; ultrasound imaging; genetic engineering;
CRISPR; stem cells; the microbiome; circadian rhythms; the theory of relativity; quantum entanglement; prime numbers;
probability; the Pythagorean theorem; derivatives in calculus; logarithms; exponential growth; statistics and
sampling; the normal distribution; vectors; matrices; fractals; the Fibonacci sequence; desalination; rust and
corrosion; polymers; superconductors; the ozone layer; ocean acidification; biodiversity loss; invasive species;
tsunamis; the Richter scale; tornadoes; monsoons; the rock cycle; fossils; dinosaur extinction; human evolution; blood
clotting; allergies; insulin and diabetes; the nervous system; reflexes; color vision; hearing; taste buds
""")
TECH = word_list("""
machine learning; neural networks; large language models; the internet; GPS; Wi-Fi; Bluetooth; cloud computing;
encryption; public-key cryptography; passwords and hashing; two-factor authentication; blockchain; quantum computing;
operating systems; compilers; databases; search engines; recommendation systems; computer viruses; firewalls;
open-source software; version control with Git; APIs; web browsers; cookies on websites; domain names and DNS; data
compression; image recognition; self-driving cars; electric cars; drones; smart home devices; 5G networks; fibre-optic
cables; satellites; touchscreens; QR codes; barcodes; RFID tags; virtual reality; augmented reality; speech
recognition; machine translation; spreadsheets; computer memory; CPUs; GPUs; solid-state drives; containers and
Docker; microservices; unit testing; agile software development; technical debt; cybersecurity; phishing emails; data
privacy; content delivery networks; streaming video; digital cameras; e-readers; robotics
""")
HEALTH = word_list("""
sleep hygiene; hydration; stretching; strength training; aerobic exercise; a balanced diet; dietary fibre; protein;
vitamin D; caffeine; stress; mindfulness; posture at a desk; eye strain from screens; the common cold; seasonal flu;
hand washing; sunscreen; first aid for burns; back pain; headaches; blood pressure; cholesterol; heart rate zones;
food allergies; lactose intolerance; healthy snacks; meal prep; intermittent fasting; walking every day
""")
HISTORY = word_list("""
the Roman Empire; the Renaissance; the Industrial Revolution; ancient Egypt; the printing press; the Silk Road;
democracy in ancient Athens; the French Revolution; the Cold War; the ancient Olympic Games; the Great Wall of China;
the Maya civilization; the invention of writing; the history of money; the Enlightenment; World War I; World War II;
the space race; the history of tea; the Vikings; the Ottoman Empire; the civil rights movement; the Byzantine Empire;
the Aztecs; the abolition of slavery; women's suffrage; the history of chess; the history of cinema; the Inca Empire;
the Mongol Empire; the Black Death; the fall of the Berlin Wall; the Meiji Restoration; the Protestant Reformation;
the Age of Exploration; the American Revolution; the Magna Carta; ancient Mesopotamia; the Library of Alexandria; the
Han dynasty; the Mughal Empire; the Hanseatic League; the Apollo 11 mission; the history of the bicycle; the
transatlantic telegraph; the history of vaccines; the Scientific Revolution; the Harlem Renaissance; the partition of
India; the founding of the United Nations; the Marshall Plan; the history of the railway; the Ming dynasty's treasure
fleets; the Phoenician alphabet; the history of the postal service
""")
SOCIETY = word_list("""
existentialism; utilitarianism; stoicism; the trolley problem; free will; the social contract; human rights; the
separation of powers; federalism; supply and demand; inflation; compound interest; the stock market; globalization;
urbanization; minimum wage laws; universal basic income; opportunity cost; comparative advantage; central banks; game
theory; the tragedy of the commons; cognitive biases; confirmation bias; the bystander effect; language acquisition;
bilingualism; dialects; the origins of English; folk tales; cultural relativism; the ethics of AI; privacy rights;
freedom of speech; propaganda; media literacy; the scientific method; critical thinking; Plato's allegory of the cave;
Confucian ethics; Buddhist philosophy; the Socratic method
""")
ARTS = word_list("""
jazz music; impressionist painting; Shakespeare's plays; Greek mythology; haiku poetry; the sonnet; baroque music;
hip-hop; the blues; opera; ballet; street art; photography; film noir; animation; graphic novels; the novel as a form;
science fiction; detective fiction; fairy tales; Gothic architecture; modernist architecture; Japanese woodblock
prints; the Bauhaus; surrealism; cubism; abstract expressionism; pottery; calligraphy; stand-up comedy; musical
theatre; the symphony orchestra; minimalism in design; color theory; typography; video game design; documentary films;
folk music; flamenco; Bollywood; K-pop; the Harry Potter phenomenon; mythology of the Norse gods
""")
BUSINESS = word_list("""
a business plan; cash flow; profit margins; pricing strategy; market research; customer retention; brand identity;
social media marketing; email newsletters; negotiation; remote teams; one-on-one meetings; performance reviews; hiring
a first employee; startup funding; bootstrapping a company; franchising; supply chains; inventory management; project
management; OKRs; the Pareto principle; product-market fit; customer support; writing a press release; invoicing
clients; freelancing; small business taxes; e-commerce; subscription businesses; company culture; leadership styles;
giving feedback; conflict at work; running effective meetings; public relations
""")
# Activities and situations someone wants advice on (gerunds and noun phrases).
EVERYDAY = word_list("""
learning a new language; saving money; starting a vegetable garden; running a first marathon; working from home;
cooking for one; adopting a dog; adopting a cat; moving to a new city; public speaking; time management; healthy
breakfasts; studying for exams; preparing for a job interview; planning a rainy weekend; a first camping trip;
organising a birthday party; opening a small bakery; a school science fair; starting a book club; choosing a hiking
trail; a long train journey; buying a new smartphone; starting a community garden; a winter holiday; a family reunion;
a first day at a new job; learning to swim; fixing a flat bicycle tyre; setting up a home office; starting meditation;
volunteering; budget travel; decluttering a home; writing a CV; asking for a raise; making friends as an adult;
learning to play the guitar; learning to draw; keeping houseplants alive; reducing food waste; composting; packing
light for travel; planning a wedding on a budget; teaching a child to ride a bike; potty training a toddler; caring
for an elderly parent; buying a used car; renting a first apartment; dealing with a noisy neighbour; preparing for a
power cut; baking sourdough bread; brewing better coffee at home; hosting a dinner party; planning a road trip;
learning to code; building a reading habit; quitting social media; waking up earlier; keeping a journal; starting a
podcast; training for a 5K run; starting yoga; rock climbing for beginners; learning to ski; cycling to work; choosing
running shoes; staying focused while studying; a gap year; applying to university; writing a wedding speech;
organising a bookshelf; repainting a room; moving house with kids; traveling with a pet; visiting Japan for the first
time; a weekend in Lisbon; backpacking in South America; a city break in Rome; a road trip through Norway; visiting
national parks; jet lag; learning to cook rice; meal planning for a family; grocery shopping on a budget; eating more
vegetables; making pasta from scratch; fermenting vegetables at home; planning a picnic; throwing a surprise party;
negotiating rent; saving for retirement; paying off a credit card; building an emergency fund; starting to invest;
managing a household budget
""")
SPORTS = word_list("""
football tactics; the offside rule; basketball fundamentals; tennis scoring; the Tour de France; marathon pacing;
swimming technique; chess openings; table tennis; golf etiquette; cricket rules; rugby positions; volleyball; rowing;
the decathlon; the history of the World Cup; sports nutrition; injury prevention in sports; team captaincy; coaching
children's sports
""")
FOOD = word_list("""
sourdough starters; fermentation in cooking; umami; olive oil; spices of Indian cooking; Japanese ramen; French
pastry; Mexican street food; coffee roasting; tea ceremonies; chocolate making; cheese making; knife skills; the
Maillard reaction; vegetarian protein; food preservation; street food in Bangkok; the Mediterranean diet; pizza dough;
slow cooking
""")

# Roleplay: who the assistant plays.
PERSONAS = word_list("""
a medieval blacksmith; a lighthouse keeper; a pirate captain; a friendly household robot; a detective in 1920s London;
an astronaut on the space station; a museum guide; a barista on a busy morning; a grumpy old wizard; a football
commentator; a park ranger; a head chef in a busy restaurant; a time traveller from 1850; a patient customer service
agent; a personal fitness coach; a Socratic philosophy tutor; an evening news anchor; a tour guide in ancient Rome; a
talking cat; a dragon guarding its treasure; a marine biologist; a village baker; a librarian; a night-shift nurse; a
taxi driver in New York; a bee in a busy hive; a mountain guide; a film director; a stage magician; an ancient Greek
philosopher; a royal court jester; a submarine captain; a Victorian inventor; a wise old tortoise; a game show host; a
kindergarten teacher; a carpenter; a weather forecaster; a Mars colonist; a flight attendant; a sommelier; a football
coach at half time; a job interviewer; a startup founder pitching investors; a tech support agent; a travel agent; a
real estate agent; a yoga instructor; a history professor; a ghost in an old castle; a knight returning from a quest;
a farmer at a market stall; a radio DJ; a bookshop owner; a zookeeper; a cruise ship captain; an art critic; a sleepy
dormouse; a robot learning about humans; a spy in a Cold War thriller; a lifeguard; a florist; a clockmaker; a postman
in a small village; a video game character who knows it is in a game; a historian from the year 2300; a court judge; a
train conductor; a polar explorer; a beekeeper
""")
JOBS = word_list("""
barista; software engineer; primary school teacher; nurse; graphic designer; data analyst; sales assistant; project
manager; accountant; chef; electrician; marketing coordinator; librarian; receptionist; web developer; warehouse
supervisor; physiotherapist; customer support specialist; lab technician; journalist; social media manager; bank
teller; museum curator; delivery driver; UX researcher
""")
PRODUCTS = word_list("""
a reusable water bottle; noise-cancelling headphones; a standing desk; a smart watch; an electric kettle; a robot
vacuum cleaner; a camping tent; a mechanical keyboard; a yoga mat; a coffee grinder; a portable charger; a backpack
for commuters; a cast-iron pan; an e-bike; a family board game; a desk lamp; a wireless mouse; a language-learning
app; a meal-kit subscription; a plant-based protein bar; a children's tablet; a rain jacket; a hiking boot; an air
fryer; a baby monitor; a fitness tracker; a sleep mask; a travel pillow; a blender; a smart thermostat; a photo
printer; a bamboo toothbrush; a sunscreen for sport; a budgeting app; a bluetooth speaker; a kids' bicycle
""")
PLACES = word_list("""
Paris; Tokyo; Lima; Cairo; Oslo; Toronto; Nairobi; Madrid; Seoul; Sydney; Berlin; Mumbai; Lisbon; Denver; Istanbul;
Hanoi; Reykjavik; Cape Town; Buenos Aires; Vancouver; Edinburgh; Kyoto; Marrakesh; Prague; Singapore; Mexico City;
Copenhagen; Dublin; Bangkok; Melbourne; Vienna; Montreal; Athens; Santiago; Helsinki; Amsterdam
""")
NAMES = word_list("""
Alice; Ben; Chloe; David; Emma; Farid; Grace; Hiro; Ines; Jonas; Kemi; Liam; Maya; Noah; Olga; Pedro; Quinn; Rosa;
Sam; Tara; Uma; Victor; Wen; Ximena; Yusuf; Zoe; Aisha; Bruno; Carmen; Dmitri; Elena; Felix; Gita; Hassan; Ivy; Jamal;
Keiko; Lucas; Mei; Nadia; Omar; Priya; Rafael; Sofia; Tomas; Valentina; William; Yara
""")
SURNAMES = word_list("""
Smith; Garcia; Chen; Okafor; Müller; Rossi; Tanaka; Novak; Silva; Kowalski; Haddad; Patel; Johansson; Dubois; Nguyen;
Murphy; Kim; Costa; Ivanova; Mensah; Larsen; Ortiz; Schneider; Ahmed
""")
COMPANIES = word_list("""
Northwind Labs; Bluefin Logistics; Acorn Bakery; Helix Health; Quarry Software; Lumen Energy; Pebble Print; Tidewater
Travel; Orchard Foods; Summit Outdoor; Cobalt Robotics; Maple & Co; Brightside Insurance; Vantage Media; Greenleaf
Gardens; Ironclad Security; Harbor Books; Nimbus Cloud; Riverstone Realty; Kestrel Airlines
""")
MONTHS = word_list("January; February; March; April; May; June; July; August; September; October; November; December")
WEEKDAYS = word_list("Monday; Tuesday; Wednesday; Thursday; Friday; Saturday; Sunday")
