"""Drive real JS editors (Hocuspocus provider 4.x, y-websocket 3.x) from Python tests.

Each :class:`JsEditor` runs ``node tests/js/<script>`` as a subprocess speaking a JSON-lines
protocol: commands on stdin, events on stdout (see ``tests/js/editor_common.mjs``).

    async with JsEditor.hocuspocus(url, token="t", docs=["a", "b"]) as ed:
        await ed.wait_for(lambda e: e["event"] == "synced" and e["doc"] == "a")
        await ed.send({"cmd": "insert", "doc": "a", "index": 0, "text": "hi 👋"})
        await ed.wait_text("a", "hi 👋")

Tests that need Node must fail loudly when it is missing: call :func:`require_node` (or
assert :func:`node_available` with :data:`NODE_MODULES_MISSING` as the message), never skip.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "JS_DIR",
    "NODE_MODULES",
    "NODE_MODULES_MISSING",
    "TESTS_DIR",
    "EditorExitedError",
    "JsEditor",
    "node_available",
    "require_node",
    "tiptap_document",
    "tiptap_reads",
    "yjs_applied",
]

TESTS_DIR = Path(__file__).resolve().parent
JS_DIR = TESTS_DIR / "js"
NODE_MODULES = TESTS_DIR / "node_modules"

_REQUIRED_PACKAGES = (
    "@hocuspocus/provider",
    "y-websocket",
    "yjs",
    "ws",
    "y-protocols",
    "lib0",
    "y-prosemirror",
    "@tiptap/core",
    "@tiptap/starter-kit",
)

NODE_MODULES_MISSING = (
    f"The JS interop tests need Node.js (`node` on PATH) and {NODE_MODULES} with "
    f"{', '.join(_REQUIRED_PACKAGES)} installed. Run `cd tests && npm ci` "
    "(the committed package-lock.json pins the exact versions). These tests fail rather than "
    "skip so that a missing toolchain is never mistaken for passing interop."
)

Event = dict[str, Any]
Predicate = Callable[[Event], bool]


def node_available() -> bool:
    """True if ``node`` is on PATH and tests/node_modules holds the JS client packages."""
    if shutil.which("node") is None:
        return False
    return all((NODE_MODULES / pkg / "package.json").is_file() for pkg in _REQUIRED_PACKAGES)


def require_node() -> None:
    """Raise ``RuntimeError(NODE_MODULES_MISSING)`` unless :func:`node_available`."""
    if not node_available():
        raise RuntimeError(NODE_MODULES_MISSING)


def run_node_script(args: list[str], stdin: str) -> str:
    """Run ``node js/<script> args...`` in tests/ with ``stdin``; its stdout. Raises with the
    script's stderr when it fails."""
    require_node()
    node = shutil.which("node")
    assert node is not None
    result = subprocess.run(
        [node, *args], cwd=TESTS_DIR, input=stdin, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def yjs_applied(updates: Sequence[bytes]) -> dict[str, Any]:
    """What one fresh ``Y.Doc`` in Node became after ``updates``, in order
    (``tests/js/apply_updates.mjs``): its text, map, state vector (base64) and ``pending``."""
    stdout = run_node_script(
        ["js/apply_updates.mjs"],
        json.dumps([base64.b64encode(update).decode() for update in updates]),
    )
    return dict(json.loads(stdout))


def tiptap_document(content: list[dict[str, Any]], fragment: str = "default") -> bytes:
    """A Yjs update of a rich document as a Tiptap editor writes it: ProseMirror JSON blocks
    (``content`` of a ``doc``) through Tiptap's StarterKit schema and y-prosemirror
    (``tests/js/rich_doc.mjs``) into the Y.XmlFragment ``fragment``."""
    stdout = run_node_script(
        ["js/rich_doc.mjs", fragment], json.dumps({"type": "doc", "content": content})
    )
    return base64.b64decode(stdout)


def tiptap_reads(update: bytes, fragment: str = "default") -> dict[str, Any]:
    """The ProseMirror JSON a Tiptap editor makes of a document's fragment (y-prosemirror with
    Tiptap's StarterKit schema, ``tests/js/rich_doc.mjs --read``); raises if the schema does
    not allow what the fragment holds."""
    stdout = run_node_script(
        ["js/rich_doc.mjs", "--read", fragment], base64.b64encode(update).decode()
    )
    return dict(json.loads(stdout))


class EditorExitedError(RuntimeError):
    """The node process ended while a test was waiting for one of its events."""


class JsEditor:
    """An async context manager around one scripted JS editor process.

    ``events`` is the full history of stdout events, in order. :meth:`wait_for` consumes it
    with a cursor: each call scans the events after the previous match (including ones that
    arrived before the call), so ``wait_for(a); wait_for(b)`` expects ``b`` after ``a``.
    The cursor starts at the very first event (``ready`` included) once :meth:`start`
    returns. :meth:`wait_text` is state based instead: it is satisfied by the latest known
    text, whatever the cursor.
    """

    def __init__(
        self,
        script: str,
        args: Sequence[str],
        *,
        trace: bool = False,
        env: dict[str, str] | None = None,
        ready_timeout: float = 15.0,
    ) -> None:
        self.script = script
        self.args = [str(a) for a in args]
        if trace:
            self.args.append("--trace")
        self.env = env
        self.ready_timeout = ready_timeout
        self.events: list[Event] = []
        self.texts: dict[str, str] = {}
        self.ready: Event | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._cursor = 0
        self._stderr: list[str] = []
        self._changed = asyncio.Condition()
        self._exited = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def hocuspocus(
        cls,
        url: str,
        *,
        docs: Sequence[str],
        token: str = "",
        name: str | None = None,
        session_awareness: bool = False,
        trace: bool = False,
        summary: bool = False,
    ) -> JsEditor:
        """A ``@hocuspocus/provider`` editor: one socket to ``url`` (…/ws), one provider per doc.
        ``summary``: text events carry the length (and synced events a SHA-256), not the text."""
        args = ["--url", url, "--token", token, "--docs", ",".join(docs)]
        if summary:
            args.append("--summary")
        if name:
            args += ["--name", name]
        if session_awareness:
            args.append("--session-awareness")
        return cls("hocus_editor.mjs", args, trace=trace)

    @classmethod
    def y_websocket(
        cls,
        url: str,
        *,
        doc: str,
        token: str | None = None,
        name: str | None = None,
        trace: bool = False,
        summary: bool = False,
    ) -> JsEditor:
        """A ``y-websocket`` editor connecting to ``url + '/' + doc`` (url is …/yjs)."""
        args = ["--url", url, "--doc", doc]
        if summary:
            args.append("--summary")
        if token is not None:
            args += ["--token", token]
        if name:
            args += ["--name", name]
        return cls("yws_editor.mjs", args, trace=trace)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> JsEditor:
        require_node()
        node = shutil.which("node")
        assert node is not None
        env = {**os.environ, **(self.env or {})}
        self.proc = await asyncio.create_subprocess_exec(
            node,
            str(JS_DIR / self.script),
            *self.args,
            cwd=str(TESTS_DIR),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )
        self._tasks = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]
        try:
            self.ready = await self.wait_for(
                lambda e: e.get("event") == "ready", timeout=self.ready_timeout
            )
        except BaseException:
            await self.kill()
            raise
        # Events emitted while the providers were being built (e.g. the initial local
        # awareness) precede `ready`: rewind so the first wait_for sees them too.
        self._cursor = 0
        return self

    async def __aenter__(self) -> JsEditor:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.quit()

    async def quit(self, timeout: float = 5.0) -> int | None:
        """Ask the editor to destroy its providers and exit; kill it after ``timeout`` s."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.send({"cmd": "quit"})
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                await self.kill()
        await self._finish_readers()
        return proc.returncode

    async def kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        await self._finish_readers()

    async def _finish_readers(self) -> None:
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(self._tasks, timeout=2.0)
        for task in pending:
            task.cancel()
        self._tasks = []

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    # -- I/O ----------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stream = self.proc.stdout
        try:
            while True:
                line = await stream.readline()
                if not line:
                    break
                text = line.decode("utf-8", errors="replace").strip()
                if not text:
                    continue
                try:
                    event = json.loads(text)
                    if not isinstance(event, dict):
                        raise ValueError("not an object")
                except ValueError:
                    event = {"event": "stdout", "line": text}
                if event.get("event") == "text" and isinstance(event.get("doc"), str):
                    self.texts[event["doc"]] = event.get("text", "")
                async with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()
        finally:
            # stdout EOF: the process is exiting; let its return code settle for diagnostics.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), 1.0)
            async with self._changed:
                self._exited = True
                self._changed.notify_all()

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                break
            self._stderr.append(chunk.decode("utf-8", errors="replace"))

    async def send(self, cmd: dict[str, Any]) -> None:
        """Write one command line to the editor's stdin."""
        if self.proc is None or self.proc.stdin is None:
            raise RuntimeError("editor not started")
        if self.proc.returncode is not None or self._exited:
            raise EditorExitedError(self._diagnostics(f"cannot send {cmd!r}: editor exited"))
        data = (json.dumps(cmd) + "\n").encode("ascii")  # \u escapes: lone surrogates OK
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    # -- waiting ------------------------------------------------------------------------

    async def wait_for(self, predicate: Predicate, timeout: float = 10.0) -> Event:
        """Return the first event after the cursor matching ``predicate``; advance the cursor.

        Raises ``TimeoutError`` (with the last 20 events and the stderr) after ``timeout``
        seconds, or :class:`EditorExitedError` at once if the process ends first.
        """
        deadline = time.monotonic() + timeout
        async with self._changed:
            while True:
                while self._cursor < len(self.events):
                    event = self.events[self._cursor]
                    self._cursor += 1
                    if predicate(event):
                        return event
                if self._exited:
                    raise EditorExitedError(
                        self._diagnostics(f"editor exited (rc={self.returncode}) while waiting")
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        self._diagnostics(f"no matching event within {timeout:.1f}s")
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    async def wait_event(self, name: str, timeout: float = 10.0, **fields: Any) -> Event:
        """``wait_for`` an event named ``name`` whose fields equal ``fields``."""
        return await self.wait_for(
            lambda e: e.get("event") == name and all(e.get(k) == v for k, v in fields.items()),
            timeout,
        )

    async def wait_text(
        self,
        doc: str,
        expected: str | Callable[[str], bool],
        timeout: float = 10.0,
    ) -> str:
        """Wait until ``doc``'s latest known text equals ``expected`` (or satisfies it).

        State based: an already-matching text returns at once. Does not move the cursor.
        """
        check: Callable[[str], bool] = (
            (lambda t: t == expected) if isinstance(expected, str) else expected
        )
        deadline = time.monotonic() + timeout
        async with self._changed:
            while True:
                if doc in self.texts and check(self.texts[doc]):
                    return self.texts[doc]
                if self._exited:
                    raise EditorExitedError(
                        self._diagnostics(f"editor exited while waiting for text of {doc!r}")
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    want = repr(expected) if isinstance(expected, str) else "predicate"
                    raise TimeoutError(
                        self._diagnostics(
                            f"text of {doc!r} is {self.texts.get(doc)!r}, wanted {want} "
                            f"within {timeout:.1f}s"
                        )
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    # -- conveniences -------------------------------------------------------------------

    async def insert(self, doc: str, index: int, text: str) -> None:
        await self.send({"cmd": "insert", "doc": doc, "index": index, "text": text})

    async def delete(self, doc: str, index: int, length: int) -> None:
        await self.send({"cmd": "delete", "doc": doc, "index": index, "length": length})

    async def set_awareness(self, doc: str, state: dict[str, Any] | None) -> None:
        await self.send({"cmd": "awareness", "doc": doc, "state": state})

    async def wait_synced(self, doc: str, timeout: float = 10.0) -> Event:
        """Wait for a ``synced`` event of ``doc`` after the cursor."""
        return await self.wait_for(
            lambda e: e.get("event") == "synced" and e.get("doc") == doc, timeout
        )

    async def get_text(self, doc: str, timeout: float = 10.0) -> str:
        """Ask the editor for ``doc``'s text (a reply event; moves the cursor past it)."""
        await self.send({"cmd": "text", "doc": doc})
        event = await self.wait_for(
            lambda e: e.get("event") == "text" and e.get("doc") == doc and e.get("reply"),
            timeout,
        )
        return str(event["text"])

    async def state(self, doc: str, timeout: float = 10.0) -> Event:
        """The editor's view of ``doc``: text, synced, unsynced, clientID, awareness…"""
        await self.send({"cmd": "state", "doc": doc})
        return await self.wait_for(
            lambda e: e.get("event") == "state" and e.get("doc") == doc, timeout
        )

    def errors(self) -> list[Event]:
        """All ``error`` events so far (exceptions inside the editor)."""
        return [e for e in self.events if e.get("event") == "error"]

    def _diagnostics(self, headline: str) -> str:
        last = self.events[-20:]
        lines = [
            f"{headline} [{self.script} {' '.join(self.args)}]",
            f"last {len(last)} of {len(self.events)} events (cursor at {self._cursor}):",
        ]
        lines += ["  " + json.dumps(e, ensure_ascii=False)[:500] for e in last]
        stderr = self.stderr.strip()
        lines.append("stderr:" + ("\n" + stderr[-4000:] if stderr else " (empty)"))
        return "\n".join(lines)


def yjs_anchors(update: bytes, at: list[tuple[list[int], int, int]]) -> list[str]:
    """Relative positions (base64) the real Yjs makes at places of a document's fragment
    ``default``: (path of child indexes to a ``Y.XmlText``, UTF-16 index, assoc) each
    (``tests/js/relative_positions.mjs --at``)."""
    stdout = run_node_script(
        ["js/relative_positions.mjs", "--at"],
        json.dumps({"update": base64.b64encode(update).decode(), "at": at}),
    )
    return list(json.loads(stdout))


def yjs_cursor_cases(content: list[dict[str, Any]]) -> dict[str, Any]:
    """A Tiptap document built from ProseMirror JSON blocks, edited concurrently by two more
    clients, with every cursor y-prosemirror makes in it and where Yjs resolves each
    (``tests/js/relative_positions.mjs``: its header says the shape)."""
    stdout = run_node_script(
        ["js/relative_positions.mjs"], json.dumps({"type": "doc", "content": content})
    )
    return dict(json.loads(stdout))
