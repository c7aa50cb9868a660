"""An embedded XMPP server (SPADE's pyjabber) for demos, examples and tests.

``spade.run(main(), embedded_xmpp_server=True)`` starts pyjabber on a fixed port
with an in-memory account database. This module starts it instead on a free
loopback port, with its database in a file of a folder you choose, and stops it
cleanly::

    async with EmbeddedXMPPServer(folder=tmp) as server:
        agent = LLMAgent(f"alice@{server.host}", "secret", port=server.port)
        await asyncio.wait_for(agent.start(auto_register=True), 30)

pyjabber keeps its state in module globals, so one process runs at most one
embedded server at a time. It listens on loopback only (pyjabber alone would also
listen on the machine's LAN address) and its HTTP upload service is left off.
Messages to a bare JID go only to available sessions, so an agent that stops and
starts again on the same JID receives messages again. A message's sender is the
JID its client logged in with, whatever ``from`` the client wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import StoreClosedError, XMPPServerError

__all__ = ["EmbeddedXMPPServer", "XMPPEndpoint", "free_port", "xmpp_endpoint"]

logger = logging.getLogger(__name__)

# The XEPs the embedded server advertises: pyjabber's defaults less HTTP upload,
# whose web server would listen on a fixed port (9090) on every address.
_PLUGINS = [
    "http://jabber.org/protocol/disco#info",
    "http://jabber.org/protocol/disco#items",
    "http://jabber.org/protocol/pubsub",
    "http://jabber.org/protocol/pubsub#publish",
    "http://jabber.org/protocol/pubsub#subscribe",
    "http://jabber.org/protocol/pubsub#config-node",
    "http://jabber.org/protocol/pubsub#create-nodes",
    "http://jabber.org/protocol/pubsub#delete-nodes",
    "jabber:iq:register",
    "jabber:x:data",
    "urn:xmpp:ping",
    "jabber:iq:rpc",
]
_PUBSUB_ITEM: dict[str, Any] = {
    "name": "Pubsub Service",
    "category": "pubsub",
    "type": "service",
    "var": "http://jabber.org/protocol/pubsub",
    "extra": {},
}
_UPLOAD_ITEM: dict[str, Any] = {
    "name": "HTTP File Upload",
    "category": "store",
    "type": "file",
    "var": "urn:xmpp:http:upload:0",
    "extra": {"max-size": 5242880},
}
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGABRT)
_running: EmbeddedXMPPServer | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _reset_pyjabber_globals() -> None:
    """Forget the queues and singletons a previous server (or event loop) left behind."""
    from pyjabber.queues.QueueManager import QueueManager
    from pyjabber.utils.Singleton import Singleton

    QueueManager._queues.clear()
    Singleton._instances.clear()


def _close_client_transports() -> None:
    """Close the client connections still open when the server stops."""
    from pyjabber.network.ConnectionManager import ConnectionManager

    manager = ConnectionManager()
    for client in list(manager._peerList.values()):
        with contextlib.suppress(Exception):
            client.transport.close()


def _install_sender_fix() -> None:
    """Make pyjabber stamp every message a client sends with the client's own JID.

    pyjabber 0.4.5 keeps the ``from`` a client writes on a message and fills it in
    only when it is missing, so one client could send as another ("from" another
    agent's JID) and be answered, kept and scoped as that agent. An XMPP server
    sets ``from`` to the sender's bound JID itself (RFC 6120, 8.1.2.1); so does
    this one now.
    """
    from pyjabber.stream.handlers.StanzaHandler import StanzaHandler

    if getattr(StanzaHandler.handle_msg, "_stamps_sender", False):
        return
    relay = StanzaHandler.handle_msg

    async def handle_msg(self: Any, element: Any) -> None:
        element.attrib["from"] = str(self._jid)
        await relay(self, element)

    handle_msg._stamps_sender = True  # type: ignore[attr-defined]
    StanzaHandler.handle_msg = handle_msg


def _install_presence_fix() -> None:
    """Make pyjabber route bare-JID messages only to sessions that are available.

    pyjabber 0.4.5 keeps a closed session in its presence table, and picks the
    sessions with the highest priority. SPADE's last presence carries priority 0
    and a new session's carries none, so messages to the bare JID of an agent that
    stopped and started again went to the dead session and were lost. Unavailable
    sessions are left out here. (A message sent while an agent is offline is still
    not delivered when it comes back: pyjabber flushes its queue before the new
    session is online. Send to an agent once it has started.)
    """
    from pyjabber.features.presence.Enums import PresenceType
    from pyjabber.features.presence.PresenceFeature import Presence
    from pyjabber.utils.Singleton import Singleton

    class _AvailablePresence(Presence):  # type: ignore[misc]
        __slots__ = ()

        def most_priority(self, jid: Any) -> list[Any]:
            live = [
                entry for entry in self.priority_by_jid(jid) if entry[1] != PresenceType.UNAVAILABLE
            ]
            values = [int(entry[-1]) for entry in live if _is_int(entry[-1])]
            best = max(values) if values else None
            return [
                entry for entry in live if (int(entry[-1]) if _is_int(entry[-1]) else None) == best
            ]

    Singleton._instances[Presence] = _AvailablePresence()


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


class EmbeddedXMPPServer:
    """pyjabber on loopback, with a file database, as an async context manager.

    Args:
        folder: where the server keeps its account database and TLS certificate;
            created if missing. Use a temporary folder; it is not cleaned here.
        host: the XMPP domain, also the name it listens on (must resolve to loopback).
        port: the client port; ``None`` picks a free one.
        start_timeout: seconds to wait for the server to listen.
        quiet: silence pyjabber's own (loguru) log output while it runs.
    """

    def __init__(
        self,
        *,
        folder: Path | str,
        host: str = "localhost",
        port: int | None = None,
        start_timeout: float = 30.0,
        quiet: bool = True,
    ) -> None:
        self._folder = Path(folder)
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._start_timeout = start_timeout
        self._quiet = quiet
        self._task: asyncio.Task[Any] | None = None
        self._server: Any = None
        self._closed = False
        self._signal_handlers: dict[int, Any] = {}

    @property
    def host(self) -> str:
        """The XMPP domain of the server; agent JIDs are ``name@host``."""
        return self._host

    @property
    def port(self) -> int:
        """The client port agents connect to.

        Raises:
            XMPPServerError: the server was not started yet.
        """
        if self._port is None:
            raise XMPPServerError("the embedded XMPP server is not started; use `async with` first")
        return self._port

    @property
    def folder(self) -> Path:
        """The folder holding the server's database and certificate."""
        return self._folder

    @property
    def running(self) -> bool:
        """Whether the server is listening."""
        return self._task is not None and not self._task.done()

    def jid(self, name: str) -> str:
        """The JID ``name@host`` of an account on this server."""
        return f"{name}@{self._host}"

    async def start(self) -> EmbeddedXMPPServer:
        """Start the server and wait until it listens.

        Raises:
            StoreClosedError: the server was stopped already; create a new one.
            XMPPServerError: another embedded server runs in this process, the port
                is taken, or the server did not come up in time.
        """
        global _running
        if self._closed:
            raise StoreClosedError("this embedded XMPP server was stopped; create a new one")
        if self._task is not None:
            return self
        if _running is not None:
            raise XMPPServerError(
                "an embedded XMPP server already runs in this process "
                f"(port {_running._port}); pyjabber supports one per process, stop it first"
            )
        port = self._requested_port or free_port()
        s2s_port = free_port()
        if not _port_is_free("127.0.0.1", port):
            raise XMPPServerError(f"port {port} is in use; pass port=None for a free one")
        self._port = port
        if self._quiet:
            from loguru import logger as loguru_logger

            loguru_logger.disable("pyjabber")
        _running = self
        try:
            server = self._build(port, s2s_port)
        except BaseException:
            await self._shutdown()
            raise
        self._remember_signal_handlers()
        self._task = asyncio.create_task(server.start(), name=f"pyjabber:{port}")
        try:
            await self._wait_ready(server)
        except BaseException:
            await self._shutdown()
            raise
        finally:
            # pyjabber installs handlers that raise SystemExit; give the process its own back.
            self._restore_signal_handlers()
        logger.info("embedded XMPP server for %s listening on 127.0.0.1:%d", self._host, port)
        return self

    def _build(self, port: int, s2s_port: int) -> Any:
        from pyjabber.plugins.xep_0363.upload_server import UploadHttpServer
        from pyjabber.plugins.xep_0363.xep_0363 import HTTPFieldUpload
        from pyjabber.server import Server
        from pyjabber.server_parameters import Parameters

        self._folder.mkdir(parents=True, exist_ok=True)
        certs = self._folder / "certs"
        certs.mkdir(exist_ok=True)
        self._copy_authority(certs)
        _reset_pyjabber_globals()
        params = Parameters(
            host=self._host,
            client_port=port,
            server_port=s2s_port,
            database_path=str((self._folder / "xmpp_accounts.db").resolve()),
            cert_path=str(certs.resolve()),
            plugins=list(_PLUGINS),
            items={"pubsub.$": dict(_PUBSUB_ITEM), "upload.$": dict(_UPLOAD_ITEM)},
        )
        server = Server(params)
        # Loopback only: pyjabber would also listen on the machine's LAN address.
        server._public_ip = None
        # Every session needs the upload plugin object; with the upload XEP left out
        # of ``plugins`` pyjabber creates neither it nor its web server on port 9090.
        HTTPFieldUpload(UploadHttpServer())
        _install_presence_fix()
        _install_sender_fix()
        self._server = server
        return server

    @staticmethod
    def _copy_authority(certs: Path) -> None:
        """pyjabber signs its host certificate with the CA shipped in its package."""
        import pyjabber

        shipped = Path(pyjabber.__file__).parent / "network" / "certs"
        for name in ("ca_cert.pem", "ca_key.pem"):
            target = certs / name
            if not target.exists():
                shutil.copyfile(shipped / name, target)

    async def _wait_ready(self, server: Any) -> None:
        assert self._task is not None
        ready = asyncio.ensure_future(server.ready.wait())
        try:
            done, _ = await asyncio.wait(
                {ready, self._task},
                timeout=self._start_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if not ready.done():
                ready.cancel()
        if ready in done:
            return
        if self._task in done:
            failure = self._task.exception() if not self._task.cancelled() else None
            raise XMPPServerError(
                f"the embedded XMPP server stopped while starting on port {self._port}: "
                f"{failure!r}; run it with quiet=False to see pyjabber's log"
            ) from failure
        raise XMPPServerError(
            f"the embedded XMPP server did not start within {self._start_timeout:g} s "
            f"on port {self._port}; run it with quiet=False to see pyjabber's log"
        )

    def _remember_signal_handlers(self) -> None:
        self._signal_handlers = {}
        for sig in _SIGNALS:
            with contextlib.suppress(ValueError):
                self._signal_handlers[sig] = signal.getsignal(sig)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._signal_handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)

    async def aclose(self) -> None:
        """Stop the server and close the connections still open. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._shutdown()

    async def _shutdown(self) -> None:
        global _running
        task, self._task = self._task, None
        try:
            if task is not None:
                _close_client_transports()
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:
                    logger.exception("the embedded XMPP server failed while stopping")
            self._stop_process_pool()
        finally:
            if _running is self:
                _running = None
            if self._quiet:
                from loguru import logger as loguru_logger

                loguru_logger.enable("pyjabber")
        logger.info("embedded XMPP server on port %s stopped", self._port)

    @staticmethod
    def _stop_process_pool() -> None:
        from pyjabber import AppConfig

        config = AppConfig.app_config
        if config is not None:
            config.process_pool_exe.shutdown(wait=True, cancel_futures=True)

    async def __aenter__(self) -> EmbeddedXMPPServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@dataclass(frozen=True, slots=True)
class XMPPEndpoint:
    """Where agents connect: an XMPP domain and the client port of its server.

    Attributes:
        domain: the domain of the agents' JIDs (``name@domain``).
        port: the client port (the server is reached at ``domain:port``).
        embedded: whether it is an embedded server started for this run.
    """

    domain: str
    port: int
    embedded: bool

    def jid(self, name: str) -> str:
        """The JID ``name@domain``."""
        return f"{name}@{self.domain}"


@contextlib.asynccontextmanager
async def xmpp_endpoint(
    host: str | None = None, port: int | None = None
) -> AsyncIterator[XMPPEndpoint]:
    """A server to run agents on: the real one at ``host:port``, else an embedded one.

    With neither given, ``$SPADE_MEMORY_XMPP_HOST`` / ``$SPADE_MEMORY_XMPP_PORT``
    are read; without them an embedded server starts on a free loopback port,
    with its database in a temporary folder removed afterwards. The same agent
    code then runs against Prosody, ejabberd or the embedded server.
    """
    host = host or os.environ.get("SPADE_MEMORY_XMPP_HOST") or None
    if port is None and os.environ.get("SPADE_MEMORY_XMPP_PORT"):
        port = int(os.environ["SPADE_MEMORY_XMPP_PORT"])
    if host is not None or port is not None:
        yield XMPPEndpoint(domain=host or "localhost", port=port or 5222, embedded=False)
        return
    with tempfile.TemporaryDirectory(prefix="spade-memory-xmpp-") as folder:
        async with EmbeddedXMPPServer(folder=folder) as server:
            yield XMPPEndpoint(domain=server.host, port=server.port, embedded=True)
