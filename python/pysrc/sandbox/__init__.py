"""Confine untrusted commands (an agent's shell commands, a plugin, a CI step) with the
strongest sandbox this Linux host offers.

    import sandbox
    out = sandbox.run(["cargo", "test"], workspace="/home/me/project", timeout=600)
    print(out.status, out.code, out.stdout.decode())

`run` blocks with the GIL released (threads run commands at once); `start` returns a
`Process` to `wait()` on or `kill()`; `start_async`/`run_async` are the asyncio variants.
The policy is the caller's: everything asked is enforced or refused before anything runs
(`InvalidOptions`, `PolicyRefused`, `SandboxUnavailable`, each with `.reason` and
`.remedy`). `doctor()` says what works here.
"""

import asyncio
import json

from . import _sandbox
from ._errors import InvalidOptions, PolicyRefused, SandboxError, SandboxUnavailable
from ._sandbox import Outcome, Process, start

__all__ = [
    "AsyncProcess",
    "InvalidOptions",
    "Outcome",
    "PolicyRefused",
    "Process",
    "SandboxError",
    "SandboxUnavailable",
    "doctor",
    "run",
    "run_async",
    "start",
    "start_async",
]


def run(argv, **options):
    """Run `argv` in a sandbox to its end and return the `Outcome`.

    The arguments are `start`'s, named as the command's options: `workspace` (default:
    the current directory), `read` and `write` (more paths), `network` ("none",
    "loopback", "proxy", "full"; default "none", or "proxy" with `allow_hosts`, or
    "loopback" with `host_ports` or `publish`), `allow_hosts` (patterns the command may
    reach through the proxy: "crates.io", "*.githubusercontent.com"), `host_ports` (the
    host's 127.0.0.1 ports the command may reach), `publish` (ports of the command's
    servers reached from the host: a port, or "PORT:HOSTPORT"; `Process.published` says
    where), `lane` ("strict", "fast", "trusted"), `timeout` (seconds), `memory_mb`, `env`
    (name -> value, or None to pass the host's), `backend` ("auto" or a name), `image`,
    `cwd`, `stdin` (bytes or str), `max_output` (bytes per stream), `changes` ("direct";
    "discard"; "review", then `Outcome.apply_changes()` or `discard_changes()`),
    `snapshot` (the same as changes="discard").

    A program that is not found, or not executable, is an outcome with code 127 or 126 and
    the reason on stderr, as in a shell; what the sandbox refused is `Outcome.denials`, the
    proxy's record `Outcome.connections`. The GIL is released while it runs; Ctrl-C kills
    the command's whole tree, then raises KeyboardInterrupt."""
    return start(argv, **options).wait()


def doctor(image=None, text=False):
    """What each compiled-in backend can do on this host, and the fix where it cannot:
    a dict (the JSON of `sandbox doctor --json`), or with `text=True` the report as
    `sandbox doctor` prints it. `image` is the container image to check docker with."""
    if text:
        return _sandbox.doctor_text(image)
    return json.loads(_sandbox.doctor_json(image))


class AsyncProcess:
    """A running command for asyncio: `await wait()`, and `await kill()` from any task.

    Cancelling the task that awaits `wait()` kills the command's whole tree first."""

    def __init__(self, process):
        self._process = process

    @property
    def done(self):
        return self._process.done

    async def wait(self):
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(outcome, error):
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(outcome)

        def on_done(outcome, error):
            # Called on a runtime thread: hand over to the loop's own thread.
            try:
                loop.call_soon_threadsafe(settle, outcome, error)
            except RuntimeError:
                pass  # the loop is closed; nobody is waiting

        self._process.on_done(on_done)
        try:
            return await future
        except asyncio.CancelledError:
            await asyncio.shield(self.kill())
            raise

    async def kill(self):
        """Kill the command and every descendant; returns once they are gone."""
        await _to_thread(self._process.kill)


async def start_async(argv, **options):
    """`start` for asyncio: the same arguments; an `AsyncProcess`. Bad arguments raise
    here, before anything runs."""
    return AsyncProcess(await _to_thread(start, argv, **options))


async def run_async(argv, **options):
    """`run` for asyncio: the same arguments; the `Outcome`."""
    process = await start_async(argv, **options)
    return await process.wait()


async def _to_thread(func, *args, **kwargs):
    # asyncio.to_thread, which Python 3.9 has; spelled out for the loop's default executor.
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: func(*args, **kwargs))
