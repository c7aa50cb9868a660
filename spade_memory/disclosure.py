"""Who sees what of an agent's memory: the one policy for everything that leaves it.

An agent's memory leaves it through three channels: what its LLM is shown in a
chat turn (recalled memory and tool results, which the LLM may repeat), and what
the memory-sharing protocol answers. Each channel asks :class:`Disclosure` for
the :class:`~spade_memory.models.Viewer` of the partner it serves, and the memory
returns only what that viewer :meth:`~spade_memory.models.Viewer.sees`:

- the partner is the bare JID the XMPP server gave as the sender, never a name
  in a message's body;
- it always sees what it told the agent itself;
- of what it did not tell, it sees global memories (and ones shared with it) of
  the categories :func:`visible_categories` gives it: never a private category
  (``SharingConfig.private_categories``, default ``{"private"}``); and when the
  agent has a ``SharingConfig``, only the categories whose allow-list names it (or
  ``"*"``) — the same categories it may query over the sharing protocol, so chat
  never shows what sharing refuses. A category on no allow-list is then seen by no
  partner but the one who told it. Without a ``SharingConfig``, every category
  but the private ones is seen.

What a partner tells through the LLM is stored in :meth:`Disclosure.scope_for`
its words (``ScopePolicy.mode``); what the agent's own code stores is global.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import DEFAULT_PRIVATE_CATEGORIES, MemoryConfig, SharingConfig
from .models import Scope, Viewer

__all__ = ["ANYONE", "Disclosure", "visible_categories"]

ANYONE = "*"


def visible_categories(
    sharing: SharingConfig | None, categories: Sequence[str], partner: str
) -> tuple[str, ...]:
    """The categories ``partner`` may see of memories it did not tell, in memory order.

    Args:
        sharing: the agent's sharing configuration, or ``None``.
        categories: the memory's categories.
        partner: the partner's normalised bare JID.
    """
    if sharing is None:
        return tuple(c for c in categories if c not in DEFAULT_PRIVATE_CATEGORIES)
    private = sharing.private_categories
    allow = sharing.allow
    return tuple(
        category
        for category in categories
        if category not in private
        and (partner in allow.get(category, ()) or ANYONE in allow.get(category, ()))
    )


class Disclosure:
    """The viewers and scopes of an agent's partners, from its :class:`MemoryConfig`.

    Args:
        config: the memory's configuration (``scope``, ``sharing``, ``categories``).
    """

    def __init__(self, config: MemoryConfig) -> None:
        self.config = config
        self.policy = config.scope

    def admits(self, partner: str) -> bool:
        """Whether the agent takes messages from ``partner`` at all (``ScopePolicy.senders``)."""
        return self.policy.admits(partner)

    def categories(self, partner: str) -> tuple[str, ...]:
        """The categories ``partner`` sees of memories it did not tell."""
        return visible_categories(self.config.sharing, self.config.categories, partner)

    def viewer(self, partner: str, conversation_id: str | None = None) -> Viewer:
        """The viewer of ``partner`` (a normalised bare JID) in ``conversation_id``.

        ``conversation_id`` must be one the partner cannot choose for another's
        conversation (the conversation behaviour binds an XMPP thread to its sender).
        """
        return Viewer(
            jid=partner,
            conversation_id=conversation_id,
            categories=frozenset(self.categories(partner)),
            may_change_global=self.policy.may_change_global,
        )

    def scope_for(self, partner: str, conversation_id: str | None = None) -> Scope:
        """The scope of what ``partner`` tells the agent (``ScopePolicy.mode``).

        A ``"per_conversation"`` memory is stored with ``conversation_id`` as its
        ``source_conversation``; told outside a conversation (a memory shared over
        the sharing protocol), it is private to ``partner`` instead.
        """
        mode = self.policy.mode
        if mode == "per_conversation" and conversation_id is not None:
            return Scope.conversation(partner)
        if mode == "shared":
            return Scope(owner=partner, visibility="global")
        return Scope.private(partner)
