"""Forming memories from a window of a conversation by rules, offline.

Two kinds of memory come out of a window:

- **episodes**: each turn worth keeping, of the partner (or of both sides:
  ``FormationConfig.episodes``), verbatim as
  ``"Speaker: text"`` (the speaker is the writer's JID local part, capitalised),
  category ``fact``, importance 0.4 (up to 0.55 for long or informative turns),
  confidence 1, context the time it was written (``"1:56 pm on 8 May, 2023"``).
  A turn is not worth keeping when it is empty, only a greeting, thanks, an
  acknowledgement or emoji ("hi", "ok", "thanks!", "好的", "谢谢", "嗯"), or one of the
  agent's canned failure answers ("Sorry, I could not ..."). A request to remember
  ("remember that the office opens at 9") is no episode: what it asks is kept as
  a statement ("the office opens at 9"), the same memory an LLM storing it with a
  tool writes, so the two are one memory told twice. Nor, from the partner alone
  (the default), is a message that only asks ("What do you know about Ana?"): asked
  of the agent, it is a request to recall.
- **statements**: what the partner says of itself
  (:func:`spade_memory.text.statements.statements`: identity, relation, preference,
  plan, habit, ability, fact), each in its own category, confidence 0.8 and the
  same dated context; its importance is its kind's, or, when the message is kept
  as an episode too, the episode's (see below). They are read from the
  partner's messages only (``role == "user"``): the agent's own "I" is the agent,
  whose statements about itself would be mistaken for the partner's, and what the
  agent says back about the partner repeats what the partner said.

A statement read from a turn that is kept as an episode says again what that
episode says: it takes the episode's importance (raised for holding a statement)
rather than its kind's. Importance counts in every search; were the statement
weighted above its own turn, the pair would outrank other turns as relevant to a
question, and a turn holding a statement would fill two of a search's places at
the expense of a third.

The same content (once case, punctuation and spacing are set aside) is formed once
per window, naming every message that said it. The order is fixed: by first
source message, episodes before statements, statements in the order they were said.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from ..config import EpisodeSource
from ..limits import LIMITS
from ..models import ConversationMessage
from ..text.content_key import normalized_text
from ..text.mentions import split_sentences
from ..text.quoting import CUT_MARK
from ..text.statements import memory_request, statements
from .dates import said_at
from .formed import FormedMemory

__all__ = [
    "CANNED_PREFIXES",
    "EPISODE_CONFIDENCE",
    "STATEMENT_CONFIDENCE",
    "allowed_category",
    "episode_content",
    "form_offline",
    "only_asks",
    "worth_keeping",
]

CANNED_PREFIXES: tuple[str, ...] = (
    "Sorry, I could not",
    "Too many messages",
    "This agent does not take messages",
    "I have nothing to add",
)
"""How the agent's canned answers (failure, time-out, rate limit, refusal, an empty
answer) start:
they say nothing about the conversation and are never formed."""

EPISODE_CONFIDENCE = 1.0
STATEMENT_CONFIDENCE = 0.8

_EPISODE_IMPORTANCE = 0.4
_SMALL_TALK = frozenset(
    {
        "hi", "hello", "hey", "hiya", "yo", "morning", "good morning", "good afternoon",
        "good evening", "good night", "night", "bye", "goodbye", "bye bye", "see you",
        "see ya", "cya", "later", "ok", "okay", "k", "kk", "ok thanks", "okay thanks",
        "ok thank you", "thanks", "thank you", "thx", "ty", "thanks a lot", "many thanks",
        "thank you so much", "thanks so much", "cheers", "yes", "no", "yeah", "yep", "nope",
        "sure", "fine", "cool", "nice", "great", "got it", "i see", "alright", "right",
        "lol", "haha", "hahaha", "hmm", "hm", "uh", "um", "oh", "ah", "wow", "np",
        "no problem", "you re welcome", "welcome", "sounds good", "perfect", "awesome",
        "noted", "understood", "of course", "will do", "done", "ok noted", "okay noted",
        "你好", "您好", "嗨", "哈喽", "早", "早上好", "晚上好", "晚安", "再见", "拜拜",
        "好", "好的", "好吧", "行", "可以", "嗯", "嗯嗯", "哦", "噢", "啊", "对", "是的",
        "谢谢", "谢谢你", "谢谢您", "多谢", "感谢", "不客气", "没问题", "收到", "明白",
        "知道了", "哈哈", "哈哈哈",
    }
)  # fmt: skip
_SYMBOLS_ONLY = re.compile(r"^[\W_]*$")


def worth_keeping(message: ConversationMessage) -> bool:
    """Whether a turn is kept as an episode: not empty, not only small talk or
    emoji, not one of the agent's canned answers."""
    text = message.text.strip()
    if not text:
        return False
    if message.role == "assistant" and text.startswith(CANNED_PREFIXES):
        return False
    if all(unicodedata.category(char)[0] in "PSZC" or char in "\ufe0f\u200d" for char in text):
        return False  # emoji, punctuation and symbols only
    folded = normalized_text(text).replace("'", " ")
    return bool(folded) and " ".join(folded.split()) not in _SMALL_TALK


_QUESTION_END = re.compile(r"[?？]\s*[\W_]*$")


def only_asks(text: str) -> bool:
    """Whether every sentence of ``text`` is a question ("What do you know about
    Ana?"): it asks and tells nothing to keep."""
    sentences = [sentence for _, sentence in split_sentences(text) if sentence.strip()]
    return bool(sentences) and all(_QUESTION_END.search(sentence) for sentence in sentences)


def allowed_category(category: str, categories: Sequence[str]) -> str:
    """``category`` if the memory allows it, else ``fact``, else its first category
    (no categories at all: ``fact``)."""
    if category in categories:
        return category
    return "fact" if "fact" in categories or not categories else categories[0]


def episode_content(message: ConversationMessage) -> str:
    """``"Speaker: text"``, within the length a memory may have (cut with ``…``)."""
    content = f"{message.speaker}: {' '.join(message.text.split())}"
    limit = LIMITS.content_chars
    return content if len(content) <= limit else content[: limit - 1] + CUT_MARK


def _episode_importance(text: str, said: int) -> float:
    importance = _EPISODE_IMPORTANCE
    if len(text) >= 60:
        importance += 0.05
    if len(text) >= 200:
        importance += 0.05
    if said:
        importance += 0.05
    return round(importance, 2)


def form_offline(
    window: Sequence[ConversationMessage],
    *,
    categories: Sequence[str],
    episodes: EpisodeSource = "partner",
) -> list[FormedMemory]:
    """The memories rules form from one window of a conversation.

    Args:
        window: the window's messages, in id order.
        categories: the categories the memory allows (the agent's
            ``MemoryConfig.categories``); a statement of a category not among them
            goes to ``fact``, else to the first of them.
        episodes: whose turns worth keeping become episodes: the partner's
            (``"partner"``), both sides' (``"all"``) or nobody's (``"none"``). A
            message asking to remember something ("remember that ...") gives what
            it asks as a statement, never an episode of its own.

    Returns:
        The formed memories, each naming its source messages, in a fixed order.
    """
    formed: dict[str, FormedMemory] = {}
    for message in window:
        said = statements(message.text, message.speaker) if message.role == "user" else []
        requested = memory_request(message.text) is not None
        context = said_at(message.at)
        kept: float | None = None  # the episode's importance, when it is kept
        if (
            (episodes == "all" or (episodes == "partner" and message.role == "user"))
            and worth_keeping(message)
            and not requested
            # asked of the agent, a question is a request to recall; between two
            # people ("all") it frames the answer that follows
            and not (episodes == "partner" and only_asks(message.text))
        ):
            kept = _episode_importance(message.text, len(said))
            _add(
                formed,
                FormedMemory(
                    content=episode_content(message),
                    category=allowed_category("fact", categories),
                    context=context,
                    importance=kept,
                    confidence=EPISODE_CONFIDENCE,
                    sources=(message.id,),
                    kind="episode",
                ),
            )
        for statement in said:
            _add(
                formed,
                FormedMemory(
                    content=statement.content,
                    category=allowed_category(statement.category, categories),
                    # what was asked to be kept, as a tool storing it would write it
                    context=None if requested else context,
                    importance=statement.importance if kept is None else kept,
                    confidence=STATEMENT_CONFIDENCE,
                    sources=(message.id,),
                    kind=statement.kind,
                ),
            )
    return list(formed.values())


def _add(formed: dict[str, FormedMemory], memory: FormedMemory) -> None:
    """Keep ``memory``, or add its sources to the same content formed before."""
    key = normalized_text(memory.content)
    earlier = formed.get(key)
    if earlier is None:
        formed[key] = memory
        return
    formed[key] = FormedMemory(
        content=earlier.content,
        category=earlier.category,
        context=earlier.context,
        importance=max(earlier.importance, memory.importance),
        confidence=max(earlier.confidence, memory.confidence),
        sources=tuple(sorted({*earlier.sources, *memory.sources})),
        kind=earlier.kind,
        entities=earlier.entities,
    )
