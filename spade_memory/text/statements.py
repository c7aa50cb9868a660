"""Statements worth keeping in one chat message, rewritten to stand alone (English and
Chinese, by rules).

A partner writing "I prefer green tea" tells the agent something lasting about
itself; :func:`statements` finds such sentences and rewrites them in the third
person with the speaker's name, so that each reads on its own months later:
"Alice prefers green tea", "小王喜欢喝绿茶". Each :class:`Statement` has a kind, the
memory category it belongs in and an importance:

============  ===========================================================  ==========  ====
kind          what was said                                                category    imp.
============  ===========================================================  ==========  ====
identity      name, job, employer, home, origin, age ("I live in Berlin",  fact        0.8
              "我叫小王", "我在北京工作")
relation      who someone is to the speaker ("My sister is Carol",          fact        0.7
              "我妈妈是老师")
preference    like, love, prefer, enjoy, hate ... ("我不喜欢香菜")          preference  0.7
plan          "I'm going to ...", "I will ...", "Next week I ...", 我打算… fact        0.6
habit         "I usually ...", "Every day I ...", 我经常…, 我每天…          pattern     0.6
ability       "I can ...", "I know how to ...", "I speak ...", 我会…        capability  0.6
fact          other first-person facts ("I have a dog named Rex", 我有…)    fact        0.6
============  ===========================================================  ==========  ====

The rewriting is written so that the relation patterns of
:mod:`spade_memory.text.relations` read it: "Alice lives in Berlin" is a ``lives_in``
claim that a later "Alice lives in Paris" supersedes, "Carol is Alice's sister" a
``sibling_of`` one.

Limits, by design (a sentence skipped costs less than a wrong fact kept):

- Only sentences whose subject is the speaker ("I", "my ...", 我, 我的…), at the
  start of the sentence (after a greeting such as "Hi," or a time such as "Next
  week"), are read; English verbs agree for the common cases ("prefer" →
  "prefers", "I'm" → "is", "I've" → "has"), "my" becomes "Alice's" and "me"
  "Alice".
- Skipped: questions, hypotheticals and hedges ("if", "would", "maybe", 如果, 也许),
  reported speech ("she said", 听说), thoughts and requests ("I think", "I need",
  "I don't know", 我想), anything addressed to the listener ("you", 你), past
  narration ("I went ...": the turn itself is kept as an episode), a second "I"
  inside the sentence, and objects that are only a pronoun ("I like it").
- Negations are kept where the rewrite is literal: "I don't eat meat" → "Alice
  does not eat meat", "我不喜欢香菜" → "小王不喜欢香菜".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .atoms import classify_atom
from .scripts import HAN as _CJK

__all__ = ["KINDS", "MAX_STATEMENT_CHARS", "Statement", "memory_request", "statements"]

KINDS: dict[str, tuple[str, float]] = {
    "identity": ("fact", 0.8),
    "relation": ("fact", 0.7),
    "preference": ("preference", 0.7),
    "plan": ("fact", 0.6),
    "habit": ("pattern", 0.6),
    "ability": ("capability", 0.6),
    "fact": ("fact", 0.6),
}
"""Each statement kind's memory category and importance."""

MAX_STATEMENT_CHARS = 300
"""Sentences longer than this are not read (few lasting facts are said in one so long)."""

_MAX_SPEAKER_CHARS = 64
_MAX_STATEMENTS = 8


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement worth keeping, rewritten to stand alone.

    Attributes:
        kind: ``identity``, ``relation``, ``preference``, ``plan``, ``habit``,
            ``ability`` or ``fact``.
        category: the memory category it belongs in (see :data:`KINDS`).
        content: the statement in the third person, naming the speaker.
        importance: from 0 to 1, by kind.
    """

    kind: str
    category: str
    content: str
    importance: float


# "Remember that ...", "记住……": the rest of the sentence is what to keep.
_REQUEST = re.compile(
    r"^\s*(?:(?:please|pls|and|also|oh)[,\s]+)*(?:remember|note|make a note|keep in mind|"
    r"don'?t forget|do not forget)(?:\s+that)?\s*[,:]?\s+(?P<en>.+?)\s*$"
    r"|^\s*(?:请|麻烦)?(?:记住|记一下|记下|别忘了|不要忘了)[，,:：]?\s*(?P<zh>.+?)\s*$",
    re.I | re.S,
)


_ASKED_KINDS = {"preference": "preference", "plan": "plan", "relation": "relation"}
"""The statement kind of what a request asks to keep, by its atom type."""
_RECALLING = re.compile(r"(?:when|what|where|who|whom|how|why|if|whether|the time)\b", re.I)


def memory_request(text: str) -> str | None:
    """What a message asks to be kept ("remember that the office opens at 9" gives
    "the office opens at 9"), or ``None`` when it asks nothing of the kind (a
    question is no request)."""
    match = _REQUEST.match(text)
    if match is None:
        return None
    asked = (match["en"] or match["zh"] or "").strip().rstrip(".!。！")
    if not asked or asked.endswith(("?", "？")) or len(asked) > MAX_STATEMENT_CHARS:
        return None
    if _RECALLING.match(asked):
        return None  # "remember when we met": a memory evoked, nothing to keep
    return asked


def _statement(kind: str, content: str) -> Statement:
    category, importance = KINDS[kind]
    return Statement(kind=kind, category=category, content=content, importance=importance)


def statements(text: str, speaker: str) -> list[Statement]:
    """The statements worth keeping in one message, each rewritten to stand alone.

    Args:
        text: the message's body.
        speaker: the name of whoever wrote it ("Alice"); it replaces "I" and "my".

    Returns:
        The statements in the order they were said, each once (at most eight).
        Never raises.
    """
    name = " ".join(speaker.split())[:_MAX_SPEAKER_CHARS] or "The speaker"
    found: list[Statement] = []
    seen: set[str] = set()
    for sentence in _sentences(text):
        if len(sentence) > MAX_STATEMENT_CHARS:
            continue
        asked = memory_request(sentence)
        if asked is not None:
            sentence = asked
        made = _chinese(sentence, name) if _CJK.search(sentence) else _english(sentence, name)
        if made is None and asked is not None:
            # kept as asked (about someone else, or no first person), of the kind its
            # cue words say ("Ana prefers mornings": a preference)
            made = (_ASKED_KINDS.get(classify_atom(asked, ()), "fact"), asked)
        if made is None:
            continue
        kind, content = made
        content = " ".join(content.split()).strip(" ,;:")
        key = content.casefold()
        if not content or key in seen:
            continue
        seen.add(key)
        found.append(_statement(kind, content))
        if len(found) >= _MAX_STATEMENTS:
            break
    return found


# -- sentences ---------------------------------------------------------------

_ZH_TIME = (
    r"(?:明天|后天|下周[一二三四五六日天末]?|下个?星期[一二三四五六日天]?|下个月|明年|今晚|"
    r"今天晚上|这个?周末|周末|待会儿?|以后|将来|每天|每周|每个(?:周末|月|星期|早上|晚上)|"
    r"每天早上|每天晚上|平时|周末的时候)"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；;…])|\n+")
_ZH_CLAUSE = re.compile(rf"[，,](?=\s*(?:{_ZH_TIME}[，,]?)?\s*我(?!们))")
_EN_CLAUSE = re.compile(
    r"(?:,\s*|;\s*|\s+)(?:and|but|so|also)\s+(?=(?:I|i)\b(?!\.)|(?:I|i)['’]|[Mm]y\b)|;\s*(?=I\b|My\b)"
)


def _sentences(text: str) -> list[str]:
    """``text`` cut into sentences, and each into its clauses that start with "I" / 我."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text.replace("’", "'")):
        sentence = sentence.strip()
        if not sentence:
            continue
        splitter = _ZH_CLAUSE if _CJK.search(sentence) else _EN_CLAUSE
        pieces.extend(part.strip() for part in splitter.split(sentence) if part.strip())
    return pieces


# -- English -----------------------------------------------------------------

_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SEASON = r"(?:summer|winter|spring|fall|autumn)"
_LEAD = re.compile(
    r"^(?:(?:oh|well|so|and|but|also|actually|btw|by\s+the\s+way|anyway|yes|yeah|yep|no|nope|"
    r"ok|okay|um|uh|hmm|fun\s+fact|honestly|frankly|sure|right|haha|lol|fyi|"
    r"(?:hi|hello|hey)(?:\s+(?:there|all|everyone|[A-Z][\w-]*))?)\b[\s,!:;.\-–—]*)+",
    re.IGNORECASE,
)
_PLAN_WHEN = (
    rf"next\s+(?:week|month|year|weekend|{_SEASON}|{_WEEKDAY})|"
    r"tomorrow(?:\s+(?:morning|afternoon|evening|night))?|tonight|later\s+today|"
    rf"this\s+(?:weekend|evening|afternoon|{_SEASON}|{_WEEKDAY})|on\s+{_WEEKDAY}|"
    r"in\s+(?:a|an|one|two|three|four|five|a\s+few|\d+)\s+(?:days?|weeks?|months?|years?)"
)
_HABIT_WHEN = (
    rf"every\s+(?:day|morning|evening|night|week|weekend|month|year|{_SEASON}|{_WEEKDAY})|"
    r"each\s+(?:day|morning|evening|night|week|weekend|month|year)|"
    rf"on\s+(?:weekends|weekdays|{_WEEKDAY}s)|most\s+(?:days|mornings|evenings|weekends)|"
    r"usually|often|always|sometimes|normally|generally|typically"
)
_WHEN = re.compile(
    rf"^(?P<when>(?P<plan>{_PLAN_WHEN})|(?P<habit>{_HABIT_WHEN}))\s*,?\s+"
    r"(?=(?:I|i)\b(?!\.)|[Mm]y\b)",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^(?:do|does|did|can|could|would|will|should|is|are|am|was|were|have|has|what|where|"
    r"when|who|whom|whose|why|how|which|shall|may)\b",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?:if|unless|whether|would|could|should|might|maybe|perhaps|probably|possibly|wish|"
    r"suppose|supposedly|imagine|pretend|hypothetically|kidding|joking|said|says|told|tells|"
    r"according|apparently|allegedly|rumou?r|wonder|wondering|hope|hoping|guess|"
    r"'d|lol|jk|sarcasm)\b",
    re.IGNORECASE,
)
_LISTENER = re.compile(r"\b(?:you|your|yours|yourself|yourselves|u|ur)\b", re.IGNORECASE)
_OTHER_I = re.compile(r"(?<![\w'])(?:I|i)(?![\w.])")
_TRAILING = re.compile(r"[\s.!。！…~]+$")
_NAME = r"[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*){0,3}"
_NAME_INTRO = re.compile(
    r"^(?:my\s+name\s+is|my\s+name's|i\s+am\s+called|i'm\s+called|call\s+me|i\s+go\s+by|"
    r"i\s+am\s+named|i'm\s+named)\s+(?P<name>[^\W\d_][\w'\-]*(?:\s+[^\W\d_][\w'\-]*){0,3})$",
    re.IGNORECASE,
)
_AGE = re.compile(r"^(?P<n>\d{1,3})(?:\s*(?:years?\s+old|yrs?\s+old|y/?o))?$", re.IGNORECASE)
_RELATIONS = (
    "best friend|boyfriend|girlfriend|fiancée|fiancee|fiancé|fiance|sister|brother|mother|"
    "mom|mum|father|dad|parents|wife|husband|partner|son|daughter|kids|children|child|"
    "friend|colleague|coworker|co-worker|boss|manager|roommate|flatmate|neighbou?r|cousin|"
    "aunt|uncle|grandma|grandmother|grandpa|grandfather|niece|nephew|teammate|"
    "dog|cat|pet"
)
_MY_RELATION = re.compile(
    rf"^my\s+(?:(?:older|younger|little|big|elder|twin|best|old|new|good|close)\s+)?"
    rf"(?P<rel>{_RELATIONS})\b(?P<rest>.*)$",
    re.IGNORECASE,
)
_MY_FAVOURITE = re.compile(r"^my\s+(?:all-time\s+)?favou?rite\b", re.IGNORECASE)
_MY_THING = re.compile(
    r"^my\s+(?P<noun>[a-z][\w\-]*(?:\s+[a-z][\w\-]*){0,2})\s+(?P<verb>is|are|was)\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
_I_AM = re.compile(r"^(?:i\s+am|i'm|im)\s+(?P<rest>.+)$", re.IGNORECASE)
_I_HAVE = re.compile(r"^(?:i\s+have|i've|ive)\s+(?P<rest>.+)$", re.IGNORECASE)
_I_WILL = re.compile(r"^(?:i\s+will|i'll)\s+(?P<rest>.+)$", re.IGNORECASE)
_I_VERB = re.compile(r"^(?:I|i)\s+(?P<rest>.+)$")
_ADVERBS = _words(
    "really also just still actually usually always often normally generally sometimes never "
    "rarely regularly mostly currently now absolutely totally definitely only mainly "
    "typically seldom occasionally even truly genuinely kinda sort of"
)
_HABIT_ADVERBS = _words(
    "usually always often normally generally sometimes never rarely regularly typically "
    "seldom occasionally"
)
_HABIT_PHRASE = re.compile(
    r"\b(?:every\s+(?:day|morning|evening|night|week|weekend|month|year|other\s+day)|"
    r"each\s+(?:day|morning|evening|week)|on\s+weekends|once\s+a\s+(?:day|week|month|year)|"
    r"twice\s+a\s+(?:day|week|month|year)|\w+\s+times\s+a\s+(?:day|week|month|year)|daily|"
    r"weekly)\b",
    re.IGNORECASE,
)
_PLAN_PHRASE = re.compile(rf"\b(?:{_PLAN_WHEN}|soon|later)\b", re.IGNORECASE)
_PREFERENCE_VERBS = _words("like love enjoy prefer adore hate dislike detest loathe fancy")
_FILLER_VERBS = _words(
    "know think guess see mean hope wish want need wonder believe suppose feel agree "
    "understand remember forget care mind bet doubt promise apologize apologise appreciate "
    "ask say tell thank get got would could should might may must am was were did "
    "wanna gotta hear suggest recommend bet swear admit"
)
_FACT_VERBS = _words(
    "have own study teach play use drive eat drink cook run ride collect write volunteer "
    "practise practice belong attend read watch grow raise keep wear support follow train "
    "sing paint dance swim walk take visit commute rent manage lead make build design "
    "develop code program sell fix bake knit hike climb travel meditate exercise go work "
    "live listen do learn speak come spend celebrate bike cycle jog surf ski skate fish "
    "garden host coach mentor volunteer"
)
_ABILITY_VERBS = frozenset({"speak"})
_PAST_ALLOWED = re.compile(
    r"^(?:(?:just|recently|finally|also)\s+)?(?:moved\s+to|relocated\s+to|was\s+born|grew\s+up|"
    r"graduated\s+from|got\s+married|married|joined|retired|started\s+working|"
    r"adopted|got\s+engaged)\b",
    re.IGNORECASE,
)
_IRREGULAR_PAST = _words(
    "went had did saw got made took came met bought ate drank ran wrote thought said told "
    "found left lost won gave knew felt heard became began brought built caught chose drew "
    "drove fell flew forgot grew held kept led lent paid put rode sang sat slept spent spoke "
    "stood swam taught threw understood woke wore was were sent sold"
)
_THIRD_PERSON = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is"}
_TRANSIENT = _words(
    "fine good ok okay great sorry glad happy sad tired sure here back done ready busy bored "
    "excited afraid scared confused lost curious wondering just also thinking looking trying "
    "asking kidding joking listening hungry thirsty well not so very really back home out "
    "in at on there going gonna about totally right wrong alright awesome cool grateful "
    "thankful pleased sleepy worried upset annoyed angry stuck new interested honest serious "
    "talking saying waiting writing calling messaging texting feeling doing"
)
_SKIP_ING = _words(
    "looking trying wondering thinking asking kidding joking talking saying waiting "
    "writing calling messaging texting feeling doing getting hoping guessing wanting "
    "checking reading"
)
_NATIONALITIES = _words(
    "american british english french german italian spanish chinese japanese korean indian "
    "canadian australian mexican brazilian russian dutch swiss swedish norwegian danish "
    "finnish polish irish scottish welsh portuguese greek turkish vietnamese thai egyptian "
    "nigerian kenyan argentinian argentine chilean colombian peruvian israeli iranian "
    "pakistani filipino indonesian malaysian singaporean austrian belgian czech hungarian "
    "ukrainian romanian taiwanese european african asian latino latina"
)
_EMPTY_OBJECT = _words(
    "it that this them those these one so too a an the lot very much there here more all "
    "both same thing things stuff yes no either neither some any lots"
)
_JOB_HINT = re.compile(r"^(?:a|an)\s+(?!(?:bit|little|lot|tad|big\s+fan|huge\s+fan|fan)\b)", re.I)
_FAN = re.compile(r"^(?:a\s+)?(?:(?:big|huge|great)\s+)?fan\s+of\s+|^(?:fond\s+of|into)\s+", re.I)


def _english(sentence: str, name: str) -> tuple[str, str] | None:
    """The (kind, content) of one English sentence, or ``None`` to skip it."""
    if sentence.rstrip().endswith("?"):
        return None
    body = _LEAD.sub("", sentence.strip())
    body = _TRAILING.sub("", body).strip()
    if not body or _QUESTION_START.match(body):
        return None
    if _HEDGE.search(body) or _LISTENER.search(body):
        return None
    when, when_kind = "", ""
    timed = _WHEN.match(body)
    if timed is not None:
        when = timed.group("when")
        when_kind = "plan" if timed.group("plan") else "habit"
        body = body[timed.end() :]
    made = _english_clause(body, name, bool(when))
    if made is None:
        return None
    kind, content = made
    if when:
        if kind not in ("identity", "relation", "preference"):
            kind = when_kind
        content = f"{when[:1].upper()}{when[1:]}, {content}"
    return kind, content


def _english_clause(body: str, name: str, timed: bool) -> tuple[str, str] | None:
    named = _NAME_INTRO.match(body)
    if named is not None:
        given = named.group("name")
        if given.casefold() == name.casefold() or given.lower() in _EMPTY_OBJECT:
            return None
        return "identity", f"{name} is called {given}"
    if re.match(r"^my\b", body, re.IGNORECASE):
        return _english_my(body, name)
    for pattern, handler in (
        (_I_AM, _english_am),
        (_I_HAVE, _english_have),
        (_I_WILL, _english_will),
    ):
        match = pattern.match(body)
        if match is not None:
            rest = match.group("rest").strip()
            return handler(rest, name) if _clean_rest(rest) else None
    match = _I_VERB.match(body)
    if match is None:
        return None
    rest = match.group("rest").strip()
    return _english_verb(rest, name, timed) if _clean_rest(rest) else None


def _clean_rest(rest: str) -> bool:
    """Whether the words after the subject can be rewritten safely."""
    if _OTHER_I.search(rest):
        return False
    words = re.findall(r"[\w'\-]+", rest.lower())
    return bool(words)


def _meaningful(obj: str) -> bool:
    """Whether an object says something (not only "it", "that", "so much" ...)."""
    words = re.findall(r"[\w'\-]+", obj.lower())
    return any(word not in _EMPTY_OBJECT for word in words)


def _third(rest: str, name: str) -> str:
    """``rest`` with "my", "mine", "me" and "myself" said of ``name``."""
    rest = re.sub(r"\bmy\b", f"{name}'s", rest, flags=re.IGNORECASE)
    rest = re.sub(r"\bmine\b", f"{name}'s", rest, flags=re.IGNORECASE)
    return re.sub(r"\b(?:me|myself)\b", name, rest, flags=re.IGNORECASE)


def _conjugate(verb: str) -> str:
    """The third-person singular of an English verb in its base form."""
    lower = verb.lower()
    if lower in _THIRD_PERSON:
        return _THIRD_PERSON[lower]
    if re.search(r"(?:s|sh|ch|x|z|o)$", lower):
        return verb + "es"
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    return verb + "s"


def _english_my(body: str, name: str) -> tuple[str, str] | None:
    if _OTHER_I.search(body):
        return None
    if _MY_FAVOURITE.match(body):
        return ("preference", _third(body, name)) if _meaningful(body[3:]) else None
    related = _MY_RELATION.match(body)
    if related is not None:
        rest = related.group("rest").strip()
        role = body[: related.start("rest")].strip()[3:].strip()
        simple = re.match(rf"^(?:is|'s)\s+(?P<who>{_NAME})$", rest)
        if simple is not None and simple.group("who").lower() not in _EMPTY_OBJECT:
            return "relation", f"{simple.group('who')} is {name}'s {role}"
        if not rest or not _meaningful(rest):
            return None
        joint = "" if rest.startswith("'") else " "  # "my brother's name": no space
        return "relation", f"{name}'s {role}{joint}{_third(rest, name)}"
    thing = _MY_THING.match(body)
    if thing is None or not _meaningful(thing.group("rest")):
        return None
    job = thing.group("noun").lower() in ("job", "job title", "profession", "occupation")
    kind = "identity" if job else "fact"
    return kind, _third(body, name)


def _english_am(rest: str, name: str) -> tuple[str, str] | None:
    lower = rest.lower()
    first = lower.split()[0]
    age = _AGE.match(rest)
    if age is not None:
        years = int(age.group("n"))
        return ("identity", f"{name} is {years} years old") if 0 < years < 130 else None
    if _FAN.match(rest):
        return ("preference", f"{name} is {_third(rest, name)}") if _meaningful(rest) else None
    if re.match(
        r"^(?:going\s+to|gonna|planning\s+to|planning\s+on|about\s+to|"
        r"leaving\s+for|flying\s+to|heading\s+to|moving\s+to)\b",
        lower,
    ):
        rest = re.sub(r"^gonna\b", "going to", rest, flags=re.IGNORECASE)
        return "plan", f"{name} is {_third(rest, name)}"
    if re.match(r"^(?:from|originally\s+from)\s+", lower):
        return "identity", f"{name} is {_third(rest, name)}"
    if re.match(r"^(?:good|great|fluent|skilled)\s+(?:at|in)\s+|^able\s+to\s+", lower):
        return "ability", f"{name} is {_third(rest, name)}"
    if re.match(r"^(?:working|employed)\s+(?:at|for|as)\s+|^living\s+in\s+", lower):
        return "identity", f"{name} is {_third(rest, name)}"
    if _JOB_HINT.match(rest):
        return ("identity", f"{name} is {_third(rest, name)}") if _meaningful(rest) else None
    if re.fullmatch(_NAME, rest):
        if lower in _NATIONALITIES:
            return "identity", f"{name} is {rest}"
        if rest.casefold() == name.casefold():
            return None
        return "identity", f"{name} is called {rest}"
    if first in _TRANSIENT or first in _SKIP_ING:
        return None
    if first == "not":
        following = lower.split()[1:2]
        if not following or following[0] in _TRANSIENT or following[0] in _SKIP_ING:
            return None
    if first.endswith("ing"):
        return "fact", f"{name} is {_third(rest, name)}"
    if len(rest.split()) > 12 or not _meaningful(rest):
        return None
    return "fact", f"{name} is {_third(rest, name)}"


def _english_have(rest: str, name: str) -> tuple[str, str] | None:
    lower = rest.lower()
    rest = re.sub(r"^got\s+", "", rest, flags=re.IGNORECASE)  # "I've got a dog": has a dog
    if re.match(
        r"^(?:(?:just|already|never|always)\s+)?(?:heard|told|said|asked|forgotten|forgot|"
        r"thought|wondered|noticed|realized|realised|tried|no\s+idea|to\s+go|"
        r"been\s+(?:thinking|wondering|meaning|trying|asking|looking))\b",
        lower,
    ):
        return None
    if not _meaningful(rest):
        return None
    kind = "fact"
    if re.match(
        r"^(?:always\s+)?(?:lived|been\s+living)\s+in\b|^(?:worked|been\s+working)\s+"
        r"(?:at|for)\b",
        lower,
    ):
        kind = "identity"
    elif re.match(r"^to\s+", lower):
        kind = "plan" if _PLAN_PHRASE.search(rest) else "fact"
    elif _HABIT_PHRASE.search(rest):
        kind = "habit"
    return kind, f"{name} has {_third(rest, name)}"


def _english_will(rest: str, name: str) -> tuple[str, str] | None:
    verb = rest.split()[0].lower()
    if verb in _FILLER_VERBS or not _meaningful(rest):
        return None
    return "plan", f"{name} will {_third(rest, name)}"


def _english_verb(rest: str, name: str, timed: bool) -> tuple[str, str] | None:
    words = rest.split()
    lead: list[str] = []
    while words and words[0].lower() in _ADVERBS:
        lead.append(words.pop(0))
    if not words:
        return None
    adverbs = " ".join(lead)
    habitual = any(word.lower() in _HABIT_ADVERBS for word in lead)
    verb, tail = words[0], " ".join(words[1:])
    lower = verb.lower()

    def written(phrase: str) -> str:
        return " ".join(part for part in (name, adverbs, phrase) if part)

    if lower in ("don't", "dont") or (lower == "do" and tail.lower().startswith("not ")):
        tail = tail[4:] if lower == "do" else tail
        negated = tail.split()
        if (
            not negated
            or negated[0].lower() in _FILLER_VERBS
            or not _meaningful(" ".join(negated[1:]))
        ):
            return None
        kind = "preference" if negated[0].lower() in _PREFERENCE_VERBS else "fact"
        if kind == "fact" and _HABIT_PHRASE.search(tail):
            kind = "habit"
        return kind, written(f"does not {_third(tail, name)}")
    if lower in ("can't", "cant", "cannot") or (lower == "can" and tail.lower().startswith("not ")):
        tail = tail[4:] if lower == "can" else tail
        if not tail or tail.split()[0].lower() in _FILLER_VERBS or not _meaningful(tail):
            return None
        if re.match(r"^stand\b", tail, re.IGNORECASE):
            return "preference", written(f"cannot {_third(tail, name)}")
        return "ability", written(f"cannot {_third(tail, name)}")
    if lower in ("won't", "wont"):
        if not tail or tail.split()[0].lower() in _FILLER_VERBS or not _meaningful(tail):
            return None
        return "plan", written(f"will not {_third(tail, name)}")
    if lower == "can":
        if not tail or tail.split()[0].lower() in _FILLER_VERBS or not _meaningful(tail):
            return None
        return "ability", written(f"can {_third(tail, name)}")
    if lower in ("know", "knows") and re.match(r"^how\s+to\s+\w", tail, re.IGNORECASE):
        return "ability", written(f"knows {_third(tail, name)}")
    if _PAST_ALLOWED.match(" ".join(words)) is not None and _meaningful(tail):
        kind = "identity" if re.match(r"^(?:moved|relocated|grew|was)\b", lower) else "fact"
        return kind, written(_third(" ".join(words), name))
    if lower in _FILLER_VERBS:
        return None
    if lower in ("plan", "intend", "aim", "expect") and re.match(r"^(?:to|on)\s+\w", tail, re.I):
        return "plan", written(f"{_conjugate(verb)} {_third(tail, name)}")
    if lower in _IRREGULAR_PAST or (lower.endswith("ed") and lower not in _FACT_VERBS):
        return None  # past narration: the turn itself is kept as an episode
    if lower in _PREFERENCE_VERBS:
        if not _meaningful(tail):
            return None
        return "preference", written(f"{_conjugate(verb)} {_third(tail, name)}")
    if (lower not in _FACT_VERBS and not (habitual or timed)) or not lower.isalpha():
        return None
    if not _meaningful(tail):
        return None
    phrase = f"{_conjugate(verb)} {_third(tail, name)}"
    lowered_tail = tail.lower()
    if _PLAN_PHRASE.search(tail) and not habitual:
        kind = "plan"
    elif habitual or _HABIT_PHRASE.search(tail):
        kind = "habit"
    elif lower in _ABILITY_VERBS:
        kind = "ability"
    elif (
        (lower == "live" and lowered_tail.startswith("in "))
        or (lower == "work" and re.match(r"^(?:at|for|as)\s", lowered_tail))
        or (lower == "come" and lowered_tail.startswith("from "))
    ):
        kind = "identity"
    else:
        kind = "fact"
    return kind, written(phrase)


# -- Chinese -----------------------------------------------------------------

_ZH_LEAD = re.compile(
    r"^(?:(?:嗯|哦|噢|啊|对|对了|其实|另外|还有|顺便说一下|顺便说|顺便|说起来|好的|好|是的|"
    r"没错|哈哈+|你好|您好|大家好|嗨|哈喽)[，,。！!、\s]*)+"
)
_ZH_WHEN = re.compile(rf"^(?P<when>{_ZH_TIME})[，,\s]*(?=我(?!们))")
_ZH_QUESTION = re.compile(
    r"[？?]|[吗么呢吧嘛]\s*[。.！!~～]*$|什么|为什么|怎么|哪|谁|多少|几点|是否"
)
_ZH_HEDGE = re.compile(
    r"如果|要是|假如|假设|也许|可能|大概|或许|好像|似乎|觉得|认为|以为|听说|据说|说过|他说|她说|"
    r"开玩笑|希望|不知道|不确定|不清楚|不记得|忘了|应该|估计|猜|我想|想要|需要|请|帮我"
)
_ZH_LISTENER = re.compile(r"你|您|我们|咱们")
_ZH_RELATIONS = (
    "男朋友|女朋友|妹妹|姐姐|哥哥|弟弟|妈妈|爸爸|母亲|父亲|妻子|老婆|丈夫|老公|太太|先生|儿子|女儿|"
    "孩子|朋友|好朋友|同事|老板|领导|上司|室友|邻居|表哥|表姐|表弟|表妹|爷爷|奶奶|外公|外婆|"
    "叔叔|阿姨|舅舅|姑姑|未婚夫|未婚妻|狗|猫|宠物"
)
_ZH_ADVERBS = (
    r"(?:也|还|真的|非常|很|特别|一直|现在|目前|已经|平时|通常|经常|每天|总是|一般|常常|都)*"
)
_ZH_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("identity", re.compile(r"^(?:叫|的名字是|的名字叫|名字是|名字叫)")),
    ("identity", re.compile(r"^(?:今年)?[0-9一二三四五六七八九十两]+(?:周)?岁")),
    ("relation", re.compile(rf"^的?(?:{_ZH_RELATIONS})")),
    ("preference", re.compile(r"^的?最喜欢的")),
    (
        "preference",
        re.compile(
            rf"^{_ZH_ADVERBS}(?:不|最|更|比较)?(?:喜欢|爱吃|爱喝|爱看|爱听|爱玩|热爱|喜爱|讨厌|偏爱|"
            r"偏好|迷上|受不了)"
        ),
    ),
    ("plan", re.compile(rf"^{_ZH_ADVERBS}(?:打算|计划|准备|将要|将会|要去|会去|会来|要|将)")),
    ("habit", re.compile(r"^.{0,4}?(?:经常|通常|每天|每周|每个|总是|一般|平时|常常|往往|习惯)")),
    ("ability", re.compile(rf"^{_ZH_ADVERBS}(?:不|没)?(?:会|能|擅长|懂)")),
    ("identity", re.compile(rf"^{_ZH_ADVERBS}(?:住在|居住在|生活在|搬到|搬去|来自|出生在|出生于)")),
    ("identity", re.compile(rf"^{_ZH_ADVERBS}在[^，。,]{{1,20}}(?:工作|上班|任职|就职|长大)")),
    (
        "identity",
        re.compile(r"^(?:是|不是)[^，。,]{0,12}(?:人|师|生|员|家|者|工|医生|护士|经理|老板|司机)$"),
    ),
    ("fact", re.compile(rf"^{_ZH_ADVERBS}(?:是|不是|有|没有|养了?|在学|学习|在读|正在学|的)")),
)


def _chinese(sentence: str, name: str) -> tuple[str, str] | None:
    """The (kind, content) of one Chinese sentence, or ``None`` to skip it."""
    body = _ZH_LEAD.sub("", sentence.strip())
    body = re.sub(r"[\s。.！!…~～]+$", "", body)
    if not body or _ZH_QUESTION.search(sentence) or _ZH_HEDGE.search(body):
        return None
    if _ZH_LISTENER.search(body):
        return None
    when, when_kind = "", ""
    timed = _ZH_WHEN.match(body)
    if timed is not None:
        when = timed.group("when")
        when_kind = "habit" if when.startswith(("每", "平时")) else "plan"
        body = body[timed.end() :]
    if not body.startswith("我"):
        return None
    rest = body[1:].strip()
    if len(rest) < 2 or "我" in rest.replace("我的", ""):
        return None
    kind = next((kind for kind, rule in _ZH_RULES if rule.search(rest)), None)
    if kind is None:
        return None
    if kind == "identity" and rest.startswith(("叫", "的名字", "名字")):
        given = re.sub(r"^(?:叫|的名字是|的名字叫|名字是|名字叫)", "", rest).strip()
        if not given or given == name or len(given) > 20:
            return None
        content = f"{name}叫{given}"
    else:
        if kind == "relation" and not rest.startswith("的"):
            rest = "的" + rest  # 我妈妈是老师: 小王的妈妈是老师
        content = name + rest.replace("我的", f"{name}的")
    if when:
        if kind not in ("identity", "relation", "preference"):
            kind = when_kind
        content = f"{when}{content}"
    return kind, content
