"""The words ``ai.text.faithful`` reads English by: numbers, months and weekdays, negations,
the words that open clauses, stopwords, and common verbs with their irregular forms.

Plain data, lower case (a right single quotation mark is read as an apostrophe).
"""

from __future__ import annotations

UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
        " fifteen sixteen seventeen eighteen nineteen".split()
    )
}
TENS = {
    w: 10 * i
    for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)
}
SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
NUMBER_WORDS = {**UNITS, **TENS, **ORDINALS, "dozen": 12, **SCALES}
# Number words too common in other senses to report on their own ("the one we liked", "first
# we met", "a second look"); a rewrite that writes them still keeps "1" or "2".
QUIET_NUMBERS = frozenset({"one", "first", "second"})

MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november"
        " december".split(),
        1,
    )
}
MONTH_ABBREVIATIONS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
    "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
MONTHS_ONLY_CAPITALISED = frozenset({"may", "march"})  # "we may", "they march"
WEEKDAYS = {
    d: i for i, d in enumerate("monday tuesday wednesday thursday friday saturday sunday".split())
}
# Capitalised only: "sat", "sun" and "wed" are words too.
WEEKDAY_ABBREVIATIONS = {
    "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4,
    "sat": 5, "sun": 6,
}  # fmt: skip
RELATIVE_DAYS = frozenset({"today", "tonight", "tomorrow", "yesterday"})

NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor", "without"}
)
NOT = "not"  # the class of "not", "n't", "cannot" and "dont"
NOT_WITHOUT_APOSTROPHE = frozenset(
    "cannot dont doesnt didnt cant isnt arent wasnt werent couldnt shouldnt wouldnt hasnt"
    " havent hadnt mustnt neednt wont aint".split()
)

# Capitalised words that are no names: the pronoun, titles, and a few all-capital words.
NOT_NAMES = frozenset(
    "i i'm i'll i'd i've ok okay fyi ps am pm mr mrs ms dr prof st jr sr re cc".split()
)
# A "." after these is no sentence end ("Mr. Smith", "e.g. Paris").
ABBREVIATIONS = frozenset("mr mrs ms dr prof st jr sr vs etc eg ie e g i inc ltd co approx".split())
SENTENCE_ENDS = frozenset(".!?…")
OPENING = frozenset("\u201c\u2018«([{")  # left double and single quotation marks
CLOSING = frozenset("\u201d»)]}")  # the right double one (U+2019 is read as an apostrophe)
LINE_MARKERS = frozenset("-*•\u2013—#>")  # bullets, an en dash, headings, quotes

# Words that open a coordinated or subordinate clause (a clause boundary before them).
CLAUSE_WORDS = frozenset(
    "and but or so then yet because since although though while whereas if unless until when"
    " whenever after before once which who where".split()
)
SUBJECTS = frozenset("i we you they he she it who people everyone someone".split())
MODALS = frozenset("will would shall should can could may might must to let's lets please".split())
AUXILIARIES = frozenset(
    "is are was were be been being am has have had do does did will would shall should can"
    " could may might must".split()
)
STOPWORDS = frozenset(
    """a an the and or but nor so yet for of in on at to from by with about as into onto over
    under up down out off than then there here this that these those it its it's i me my mine
    we us our you your he him his she her they them their theirs what which who whom whose
    when where why how all any some many much more most few less other such only own same
    very really just also too quite rather be am is are was were been being have has had do
    does did will would shall should can could may might must let let's lets if because since
    although though while whereas unless until after before once each every both either again
    still even ever well now not no never none nothing nobody nowhere neither without please
    one way lot bit per via""".split()
)
# Base forms of common verbs (a clause needs a verb to count as one), and irregular forms.
VERBS = frozenset(
    """accept add agree allow announce answer apply approve argue arrange arrive ask assign
    attend avoid book borrow break bring build buy call cancel change charge check choose clean
    close collect come commit complete confirm consider contact continue cost cover create cut
    decide delay delete deliver deploy describe design discuss draft drive drop eat email end
    enjoy ensure expect explain fail fall feel fetch file fill find finish fix fly follow
    forget get give go grow happen hand handle hear help hire hold hope include increase
    inform install invite join keep know launch learn leave lend like listen live look lose
    love make manage mark meet merge migrate miss move need offer open order organise organize
    pack pass pay pick plan play post postpone prefer prepare present print promise propose
    provide publish pull push put raise reach read receive recommend reduce refund reject
    release remember remind remove rent repair replace reply report request require reschedule
    reserve resolve rest return review run save say schedule see sell send serve set settle
    share ship show sign sit sleep solve speak spend stand start stay stop study submit suggest
    supply support switch take talk teach tell test think track train travel try turn update
    upgrade use visit wait walk want watch win work worry write""".split()
)
IRREGULAR = {
    "went": "go", "gone": "go", "came": "come", "met": "meet", "sent": "send", "left": "leave",
    "made": "make", "took": "take", "taken": "take", "gave": "give", "given": "give",
    "told": "tell", "said": "say", "paid": "pay", "bought": "buy", "sold": "sell",
    "wrote": "write", "written": "write", "built": "build", "found": "find", "brought": "bring",
    "thought": "think", "kept": "keep", "ran": "run", "began": "begin", "begun": "begin",
    "chose": "choose", "chosen": "choose", "held": "hold", "spoke": "speak", "spoken": "speak",
    "saw": "see", "seen": "see", "done": "do", "got": "get", "gotten": "get", "knew": "know",
    "known": "know", "felt": "feel", "lost": "lose", "spent": "spend", "sat": "sit",
    "slept": "sleep", "taught": "teach", "won": "win", "drove": "drive", "driven": "drive",
    "ate": "eat", "eaten": "eat", "flew": "fly", "flown": "fly", "fell": "fall",
    "fallen": "fall", "grew": "grow", "grown": "grow", "heard": "hear", "lent": "lend",
    "broke": "break", "broken": "break", "stood": "stand", "forgot": "forget",
    "forgotten": "forget", "understood": "understand",
}  # fmt: skip
# Words ending in "ed" that are not past tenses.
NOT_PAST = frozenset(
    "hundred indeed speed seed feed breed greed need bed red shed naked wicked sacred".split()
)
