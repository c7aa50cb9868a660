"""An offline, deterministic LLM that understands simple memory requests.

:class:`ScriptedLLM` needs no network and no model. It reads the last user request
and, in English or Chinese, recognises:

- "remember that X", "请记住：X", "记一下X" -> ``store_memory`` (category guessed)
- "note that X", "记下：X", "备注：X" -> ``remember_interaction_info``
- "what do you know about X", "你知道X吗", "X是什么" -> ``search_memories``
- "list your memories", "你记得什么" -> ``list_memories``
- "forget memory 12", "delete memory #12", "忘记记忆12" -> ``forget_memory``

A request that is not one of these as a whole is read sentence by sentence, last
first, then clause by clause ("I am bob. list your memories" lists them).

It calls a tool only when that tool is offered, makes at most one call per request,
and after a tool result always answers in text, so a tool loop driven by it ends.
User messages starting with ``<memory-context`` are recalled data, never requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LLMError
from ..llm.messages import (
    ChatMessage,
    LLMResponse,
    ToolCall,
    tool_names,
)

__all__ = ["ScriptedCall", "ScriptedLLM", "memory_lines"]

CONTEXT_MARKER = "<memory-context"

_I = re.IGNORECASE
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LEAD = re.compile(
    r"^(?:(?:please|pls|plz|kindly|hey|hi|hello|ok|okay|so|now|also|and|could you|can you"
    r"|would you|will you)\b|请你?|麻烦你?|帮我|帮忙|你能|能不能|可以|那么|好的)[\s,，:：!！]*",
    _I,
)
_TAIL = re.compile(
    r"(?:[\s,，]*(?:\b(?:please|thanks|thank you)|谢谢你?|吧|哦|啊|呀|呢|吗))+$|[\s.!?。！？~…]+$",
    _I,
)
_SEP = r"[\s,，:：]*"

_FORGET = [
    re.compile(
        r"^(?:forget|delete|remove|erase|drop)\s+(?:the\s+)?(?:memory\s*)?(?:with\s+)?"
        r"(?:#|id\s*|number\s*|no\.?\s*)?(\d{1,18})$",
        _I,
    ),
    re.compile(
        r"^(?:忘记|忘掉|删除|删掉)(?:记忆)?\s*(?:#|编号|第)?\s*(\d{1,18})\s*(?:号|条)?(?:记忆)?$"
    ),
]
_CATEGORY_WORDS = {
    "fact": "fact", "facts": "fact", "事实": "fact",
    "pattern": "pattern", "patterns": "pattern", "习惯": "pattern", "模式": "pattern",
    "preference": "preference", "preferences": "preference", "偏好": "preference",
    "capability": "capability", "capabilities": "capability", "能力": "capability",
}  # fmt: skip
_LIST = [
    re.compile(
        r"^(?:list|show)(?:\s+me)?(?:\s+all)?(?:\s+(?:of\s+)?(?:your|the|my))?"
        r"(?:\s+(facts?|patterns?|preferences?|capabilit(?:y|ies)))?(?:\s+memor(?:y|ies))?$",
        _I,
    ),
    re.compile(r"^what (?:do|did|can) you (?:remember|recall|know)$", _I),
    re.compile(r"^what have you (?:remembered|memori[sz]ed|stored|learned|learnt)$", _I),
    re.compile(r"^what memories do you (?:have|keep|hold)$", _I),
    re.compile(r"^(?:show me |tell me )?everything you (?:remember|know|stored)$", _I),
    re.compile(r"^dump (?:all )?(?:of )?your memor(?:y|ies)$", _I),
    re.compile(r"^(?:列出|显示|查看)(?:所有|全部)?的?(事实|习惯|模式|偏好|能力)?的?记忆$"),
    re.compile(r"^你(?:都)?(?:记得|记住了|知道)(?:些|哪些)?(?:什么|事情?)$"),
    re.compile(r"^把你的(?:所有|全部)?记忆(?:都)?列出来$"),
]
_NOTE = [
    re.compile(
        r"^(?:(?:make|take) (?:a )?note|note(?: down)?)\b(?:\s+that\b|\s+of\b)?" + _SEP + r"(.+)$",
        _I,
    ),
    re.compile(r"^(?:记下来?|备注|记录(?:一下|下)?)" + _SEP + r"(.+)$"),
]
_REMEMBER = [
    re.compile(
        r"^(?:remember|memori[sz]e|don't forget|do not forget)\b(?:\s+(?:that|this)\b)?"
        + _SEP
        + r"(.+)$",
        _I,
    ),
    re.compile(r"^(?:记住|记一下|记着|牢记)" + _SEP + r"(.+)$"),
]
_SEARCH = [
    re.compile(r"^what (?:do|did) you (?:know|remember|recall) about\s+(.+)$", _I),
    re.compile(r"^do you (?:remember|know|recall)(?:\s+anything)?(?:\s+about)?\s+(.+)$", _I),
    re.compile(r"^tell me (?:what you know about|everything about|about)\s+(.+)$", _I),
    re.compile(r"^(?:tell|give) me\s+(?:the\s+)?(.+)$", _I),
    re.compile(
        r"^(?:search|look up|find|recall)(?:\s+(?:your\s+)?memor(?:y|ies))?"
        r"(?:\s+(?:for|about))?\s+(.+)$",
        _I,
    ),
    re.compile(r"^(?:what|who|where) (?:is|are|was|were)\s+(.+)$", _I),
    re.compile(r"^(?:what's|who's|where's)\s+(.+)$", _I),
    re.compile(r"^关于(.+?)" + _SEP + r"你(?:都)?(?:知道|记得)(?:些)?什么$"),
    re.compile(r"^你(?:知道|记得)(?:关于)?(.+?)(?:的事)?吗?$"),
    re.compile(r"^(?:告诉我|说说)(?:关于)?(.+?)(?:的事情?|的信息)?$"),
    re.compile(r"^(?:搜索|查找|查询|回忆)(?:记忆)?(?:中的)?" + _SEP + r"(.+)$"),
    re.compile(r"^(.+?)(?:是什么|是谁|在哪里?)$"),
]
_PREFERENCE = re.compile(
    r"\b(?:likes?|liked|prefers?|preferred|loves?|loved|favou?rites?|enjoys?|hates?|dislikes?)\b"
    r"|喜欢|偏好|爱|讨厌|偏爱",
    _I,
)
_CAPABILITY = re.compile(
    r"\b(?:can|could|able to|knows? how to|capable of|good at|skilled)\b|会|能|擅长|懂得", _I
)
_PATTERN = re.compile(
    r"\b(?:usually|always|every|often|typically|normally|habitually|each)\b|通常|总是|每|经常|习惯",
    _I,
)
_ITEM = re.compile(r"^\s*(?:[-*•>]|\d{1,4}[.)])\s+(.*\S)\s*$")
_LEAD_TAGS = re.compile(r"^(?:\[[^\]]*\]\s*|#\d+[:.]?\s+|\(id\s*[:=]?\s*\d+\)\s*)+", _I)
_TRAIL_ID = re.compile(r"\s*[(\[][^()\[\]]*(?:\bid\b\s*[:=#]?\s*|#)\d+[^()\[\]]*[)\]]\s*$", _I)
_ERROR = re.compile(
    r"^\W*(?:error|invalid|failed|failure|cannot|can't|could not|couldn't|refused|denied"
    r"|not allowed|budget|no memory with|unknown tool|[a-z_]+ (?:failed|ran out of time)\b"
    r"|错误|失败|无效|出错|拒绝)",
    _I,
)
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|[。！？；\n]+")
_CLAUSES = re.compile(r"[,，:：]\s*")


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One request :class:`ScriptedLLM` answered, kept in :attr:`ScriptedLLM.calls`."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[str, ...]
    response: LLMResponse


def _is_context(message: ChatMessage) -> bool:
    return message.role == "user" and (message.content or "").lstrip().startswith(CONTEXT_MARKER)


def _clean(text: str, *, strip_leading: bool = True) -> str:
    """The text without politeness, surrounding quotes or final punctuation.

    ``strip_leading=False`` keeps leading words (for the content a request carries).
    """
    text = " ".join(text.split())
    previous = None
    while previous != text:
        previous = text
        if strip_leading:
            text = _LEAD.sub("", text, count=1).strip()
        text = _TAIL.sub("", text).strip()
        text = text.strip("\"'“”‘’「」")
    return text


def _strip_tags(line: str) -> str:
    line = _LEAD_TAGS.sub("", line.strip())
    previous = None
    while previous != line:
        previous = line
        line = _TRAIL_ID.sub("", line)
    return line.strip()


def memory_lines(text: str) -> list[str]:
    """The memory contents in a tool result or a recalled-memory block.

    Lines starting with ``- `` (or ``* ``, ``1.``) hold memories; a leading
    ``[category]`` and a trailing ``(id N)`` / ``(#N)`` are removed, and a quoted
    content (a JSON string literal) is decoded. A JSON result
    holding ``content`` fields is read too.
    """
    found = _json_contents(text)
    if found is not None:
        return found
    items = []
    for line in text.splitlines():
        match = _ITEM.match(line)
        if match is None and line.lstrip().startswith("["):
            match = re.match(r"^\s*(\[.*\S)\s*$", line)
        if match is not None:
            content = _unquote(_strip_tags(match.group(1)))
            if content:
                items.append(content)
    return items


def _unquote(content: str) -> str:
    """The text of a quoted entry (a JSON string literal, as the memory shows it)."""
    if len(content) >= 2 and content[0] == content[-1] == '"':
        try:
            decoded = json.loads(content)
        except json.JSONDecodeError:
            return content
        if isinstance(decoded, str):
            return decoded.strip()
    return content


def _json_contents(text: str) -> list[str] | None:
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    if isinstance(data, Mapping):
        data = next((data[k] for k in ("results", "memories", "items") if k in data), [data])
    if not isinstance(data, list):
        return None
    contents = [
        item["content"].strip()
        for item in data
        if isinstance(item, Mapping) and isinstance(item.get("content"), str)
    ]
    return [c for c in contents if c]


def _is_error(result: str) -> bool:
    first = result.strip().split("\n", 1)[0]
    if _ERROR.match(first):
        return True
    try:
        data = json.loads(result)
    except (json.JSONDecodeError, ValueError):
        return False
    return isinstance(data, Mapping) and bool(data.get("error"))


def _words(text: str) -> set[str]:
    lowered = text.lower()
    return set(re.findall(r"[^\W\d_]{3,}|\d+", _CJK.sub(" ", lowered))) | set(_CJK.findall(lowered))


def _best_line(lines: Sequence[str], query: str) -> str:
    """The line sharing most words with ``query``; the first line on a tie."""
    wanted = _words(query)
    return max(lines, key=lambda line: len(wanted & _words(line)))


class ScriptedLLM:
    """A deterministic, offline :class:`~spade_memory.llm.messages.LLMClient`.

    Tool call ids are ``call_1``, ``call_2``, ... per instance, so two instances fed
    the same conversation answer identically.

    Attributes:
        calls: every request answered, in order, with the response given.
    """

    def __init__(self) -> None:
        self.calls: list[ScriptedCall] = []
        self._next_id = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"ScriptedLLM(calls={len(self.calls)}, closed={self._closed})"

    async def __aenter__(self) -> ScriptedLLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Refuse further requests."""
        self._closed = True

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        """Answer the last user request with one tool call or a text reply.

        Raises:
            LLMError: the client is closed.
        """
        if self._closed:
            raise LLMError("client is closed; create a new ScriptedLLM")
        offered = tool_names(tools)
        response = self._respond(list(messages), offered, tools)
        self.calls.append(ScriptedCall(tuple(messages), offered, response))
        return response

    def _respond(
        self,
        messages: list[ChatMessage],
        offered: tuple[str, ...],
        tools: Sequence[Mapping[str, Any]],
    ) -> LLMResponse:
        index = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if messages[i].role == "user" and not _is_context(messages[i])
            ),
            -1,
        )
        raw = (messages[index].content or "") if index >= 0 else ""
        request, _, inline_context = raw.partition(CONTEXT_MARKER)
        context = [m.content or "" for m in messages if _is_context(m)]
        if inline_context:
            context.append(CONTEXT_MARKER + inline_context)
        recalled = [line for block in context for line in memory_lines(block)]
        chinese = bool(_CJK.search(request))
        results = [m for m in messages[index + 1 :] if m.role == "tool"]
        if results:
            text = self._after_tools(messages[: index + 1], messages[index + 1 :], chinese)
            return LLMResponse(text=text, finish_reason="stop")
        intent = self._intent(request, tools)
        if intent is not None and intent[0] in offered:
            self._next_id += 1
            name, args = intent
            call = ToolCall(
                id=f"call_{self._next_id}",
                name=name,
                arguments=json.dumps(args, ensure_ascii=False, sort_keys=True),
            )
            return LLMResponse(text=None, tool_calls=(call,), finish_reason="tool_calls")
        return LLMResponse(text=self._plain(request, recalled, chinese), finish_reason="stop")

    def _intent(
        self, request: str, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, dict[str, Any]] | None:
        """The tool call a request asks for: as a whole, else its last sentence or
        clause that asks for one; ``None`` for a plain reply."""
        whole = self._whole_intent(_clean(request), tools)
        if whole is not None:
            return whole
        for splitter in (_SENTENCES, _CLAUSES):
            parts = [part for part in splitter.split(request) if part.strip()]
            if len(parts) < 2:
                continue
            for part in reversed(parts):
                found = self._whole_intent(_clean(part), tools)
                if found is not None:
                    return found
        return None

    def _whole_intent(
        self, request: str, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, dict[str, Any]] | None:
        """The tool call a cleaned request asks for as a whole, or ``None``."""
        if not request:
            return None
        for pattern in _FORGET:
            if match := pattern.match(request):
                return "forget_memory", {"memory_id": int(match.group(1))}
        for pattern in _LIST:
            if match := pattern.match(request):
                word = (match.group(1) or "").lower() if match.groups() else ""
                category = _CATEGORY_WORDS.get(word)
                return "list_memories", ({"category": category} if category else {})
        for pattern in _NOTE:
            if (match := pattern.match(request)) and (
                info := _clean(match.group(1), strip_leading=False)
            ):
                return "remember_interaction_info", {"information": info}
        for pattern in _REMEMBER:
            if (match := pattern.match(request)) and (
                content := _clean(match.group(1), strip_leading=False)
            ):
                return "store_memory", {
                    "category": _category(content, tools),
                    "content": content,
                }
        for pattern in _SEARCH:
            if (match := pattern.match(request)) and (
                query := _clean(match.group(1), strip_leading=False)
            ):
                return "search_memories", {"query": query}
        return None

    def _after_tools(
        self, before: list[ChatMessage], after: list[ChatMessage], chinese: bool
    ) -> str:
        """Answer in text from the tool results that follow the request."""
        requested = {call.id: call for message in before + after for call in message.tool_calls}
        answers = []
        for message in after:
            if message.role != "tool":
                continue
            call = requested.get(message.tool_call_id or "")
            name = call.name if call is not None else (message.name or "")
            try:
                args = call.parse_arguments() if call is not None else {}
            except ValueError:
                args = {}
            answers.append(_answer(name, args, message.content or "", chinese))
        return "\n\n".join(answers)

    @staticmethod
    def _plain(request: str, recalled: list[str], chinese: bool) -> str:
        if recalled:
            line = _best_line(recalled, request)
            return f"我记得：{line}" if chinese else f"I recall: {line}"
        return "好的。" if chinese else "Noted."


def _category(content: str, tools: Sequence[Mapping[str, Any]]) -> str:
    """Guess the category of ``content``, kept within the schema's enum if it has one."""
    if _PREFERENCE.search(content):
        guess = "preference"
    elif _CAPABILITY.search(content):
        guess = "capability"
    elif _PATTERN.search(content):
        guess = "pattern"
    else:
        guess = "fact"
    allowed = _category_enum(tools)
    if allowed and guess not in allowed:
        return "fact" if "fact" in allowed else allowed[0]
    return guess


def _category_enum(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or function.get("name") != "store_memory":
            continue
        params = function.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        spec = props.get("category") if isinstance(props, Mapping) else None
        enum = spec.get("enum") if isinstance(spec, Mapping) else None
        if isinstance(enum, list):
            return [value for value in enum if isinstance(value, str) and value]
    return []


def _answer(name: str, args: Mapping[str, Any], result: str, zh: bool) -> str:
    """The text reply to one tool result."""
    result = result.strip()
    failed = _is_error(result)
    if name == "store_memory":
        content = str(args.get("content", ""))
        if failed:
            return (
                f"抱歉，我没能记住：{result}"
                if zh
                else f"Sorry, I couldn't remember that: {result}"
            )
        return f"好的，我记住了：{content}" if zh else f"OK, I'll remember that: {content}"
    if name == "remember_interaction_info":
        info = str(args.get("information", ""))
        if failed:
            return f"抱歉，我没能记下：{result}" if zh else f"Sorry, I couldn't note that: {result}"
        return f"好的，已记下：{info}" if zh else f"OK, noted: {info}"
    if name == "forget_memory":
        number = args.get("memory_id", "?")
        if failed:
            return (
                f"抱歉，我没能忘记记忆{number}：{result}"
                if zh
                else f"Sorry, I couldn't forget memory {number}: {result}"
            )
        return f"好的，我已忘记记忆{number}。" if zh else f"OK, I've forgotten memory {number}."
    if name in ("search_memories", "list_memories"):
        topic = str(args.get("query", "")) if name == "search_memories" else ""
        if failed:
            return (
                f"抱歉，我没能查找记忆：{result}"
                if zh
                else f"Sorry, I couldn't search my memory: {result}"
            )
        items = memory_lines(result)
        if not items:
            if topic:
                return (
                    f"我不记得关于{topic}的任何事情。"
                    if zh
                    else f"I don't remember anything about {topic}."
                )
            return "我还没有任何记忆。" if zh else "I don't remember anything yet."
        bullets = "\n".join(f"- {item}" for item in items)
        if topic:
            head = f"关于{topic}，我记得：" if zh else f"Here is what I remember about {topic}:"
        else:
            head = "我记得这些：" if zh else "Here is what I remember:"
        return f"{head}\n{bullets}"
    first = result.split("\n", 1)[0] if result else ""
    if failed:
        return f"抱歉，出错了：{first}" if zh else f"Sorry, that failed: {first}"
    return f"完成：{first}" if zh else f"Done: {first}"
