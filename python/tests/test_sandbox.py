"""The `sandbox` package as a Python program uses it, each effect checked from here."""

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import sandbox
from conftest import capability, report


def processes_with(marker):
    """Pids of live processes whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def unique_seconds():
    return f"3000.{os.getpid()}{time.time_ns() % 10**9:09d}"


# The processes of a gVisor sandbox are not in the host's /proc, so whether a command's
# tree still runs is also judged from the workspace: each process below makes a new file
# ten times a second, and a tree that is gone makes no more.
def beating(who):
    """A shell loop that makes `beat-WHO-1`, `beat-WHO-2`, ... in its working directory."""
    return f"(i=0; while :; do i=$((i+1)); : > beat-{who}-$i; sleep 0.1; done)"


def beats(workspace):
    return sum(1 for name in os.listdir(workspace) if name.startswith("beat-"))


def assert_no_beat(workspace):
    """Nothing of the tree makes files any more (after it made some)."""
    before = beats(workspace)
    assert before > 0, "the command never beat, so this proves nothing"
    time.sleep(1)
    assert beats(workspace) == before, "something of the tree still runs"


def test_exit_codes_and_output_are_the_programs(backend, workspace):
    for code in (0, 3, 42):
        out = sandbox.run(["sh", "-c", f"printf out; printf err >&2; exit {code}"],
                          workspace=workspace, **backend)
        assert out.status == "exited"
        assert out.code == code
        assert out.exit_status == code
        assert out.ok == (code == 0)
        assert out.stdout == b"out"
        assert out.stderr == b"err"
        assert not out.stdout_truncated and not out.stderr_truncated
        assert out.backend == backend["backend"]
        assert out.wall_time > 0
        assert out.policy["backend"] == backend["backend"]
        assert out.policy["network"] == "none"
    out = sandbox.run(["sh", "-c", "kill -TERM $$"], workspace=workspace, **backend)
    if capability(backend["backend"])["signal_status"]:
        assert out.status == "signaled" and out.signal == 15 and out.code is None, out
    else:
        # The backend cannot tell a signal from an exit code (docker): the shell's number.
        assert out.status == "exited" and out.code == 128 + 15, out
    out = sandbox.run(["cat"], workspace=workspace, stdin=b"fed\n", **backend)
    assert out.stdout == b"fed\n"


def test_output_over_the_cap_is_cut_and_says_so(backend, workspace):
    out = sandbox.run(["sh", "-c", "yes abcdefgh | head -c 100000"],
                      workspace=workspace, max_output=1000, **backend)
    assert out.stdout_truncated
    assert len(out.stdout) < 2000


def test_a_read_outside_the_workspace_fails(backend, workspace):
    outside = tempfile.mkdtemp()
    try:
        # Readable by anyone, so that only the sandbox stands between the command and it.
        os.chmod(outside, 0o755)
        secret = os.path.join(outside, "secret")
        with open(secret, "w") as f:
            f.write("the-secret-value\n")
        os.chmod(secret, 0o644)
        out = sandbox.run(["cat", secret], workspace=workspace, **backend)
        assert out.status == "exited" and out.code != 0, out
        assert b"the-secret-value" not in out.stdout
        # Named as readable, the same read works: the failure above was the sandbox's.
        out = sandbox.run(["cat", secret], workspace=workspace, read=[outside], **backend)
        assert out.code == 0 and out.stdout == b"the-secret-value\n", out
    finally:
        import shutil
        shutil.rmtree(outside, ignore_errors=True)


def test_a_write_outside_the_workspace_fails_and_the_file_is_absent(backend, workspace):
    outside = tempfile.mkdtemp()
    os.chmod(outside, 0o777)
    target = os.path.join(outside, "escaped")
    out = sandbox.run(["sh", "-c", f"echo x > {target}"], workspace=workspace, **backend)
    assert out.code != 0, out
    assert not os.path.exists(target)
    os.rmdir(outside)


def test_the_timeout_kills_the_tree(backend, workspace):
    marker = unique_seconds()
    started = time.monotonic()
    out = sandbox.run(["sh", "-c", f"{beating('a')} & sleep {marker} & sleep {marker}"],
                      workspace=workspace, timeout=3.0, **backend)
    assert out.status == "timed_out" and out.exit_status == 124, out
    assert time.monotonic() - started < 30
    assert processes_with(marker) == []
    assert_no_beat(workspace)


def test_kill_from_another_task(backend, workspace):
    marker = unique_seconds()

    async def scenario():
        process = await sandbox.start_async(
            ["sh", "-c", f"({beating('a')} &); {beating('b')} & sleep {marker}; wait"],
            workspace=workspace, **backend)
        deadline = time.monotonic() + 30
        while not all(os.path.exists(os.path.join(workspace, f"beat-{w}-3")) for w in "ab"):
            assert time.monotonic() < deadline, "the command did not start"
            await asyncio.sleep(0.05)

        async def killer():
            await process.kill()

        waiting = asyncio.ensure_future(process.wait())
        await asyncio.gather(killer(), waiting)
        return waiting.result()

    out = asyncio.run(scenario())
    assert out.status == "killed", out
    assert processes_with(marker) == []
    assert_no_beat(workspace)


def test_cancelling_the_waiting_task_kills_the_tree(backend, workspace):
    marker = unique_seconds()

    async def scenario():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                sandbox.run_async(["sh", "-c", f"{beating('a')} & sleep {marker}; :"],
                                  workspace=workspace, **backend),
                timeout=3)

    asyncio.run(scenario())
    assert processes_with(marker) == []
    assert_no_beat(workspace)


def test_ctrl_c_during_run_kills_the_tree_then_raises(backend, workspace):
    marker = unique_seconds()
    # The marker reaches the child through its environment, so that only the sandboxed
    # processes carry it in their command lines.
    script = (
        "import os, sys, sandbox\n"
        "options = eval(os.environ['OPTIONS'])\n"
        "try:\n"
        "    sandbox.run(['sh', '-c', os.environ['BEAT'] + ' & sleep ' + os.environ['MARK'] + '; :'], **options)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(42)\n"
    )
    env = dict(os.environ, MARK=marker, BEAT=beating("a"),
               OPTIONS=repr(dict(workspace=workspace, **backend)))
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(workspace, "beat-a-3")):
            assert time.monotonic() < deadline, "the command did not start"
            assert child.poll() is None, "the program ended early"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=60) == 42
    finally:
        if child.poll() is None:
            child.kill()
    assert processes_with(marker) == []
    assert_no_beat(workspace)


def test_run_async_returns_the_outcome(backend, workspace):
    out = asyncio.run(sandbox.run_async(["sh", "-c", "exit 7"], workspace=workspace, **backend))
    assert out.status == "exited" and out.code == 7


@pytest.mark.parametrize("options, error, named", [
    ({"network": "everything"}, sandbox.InvalidOptions, "network"),
    ({"lane": "lax"}, sandbox.InvalidOptions, "lane"),
    ({"timeout": -1}, sandbox.InvalidOptions, "timeout"),
    ({"timeout": 0}, sandbox.InvalidOptions, "timeout"),
    ({"memory_mb": 0}, sandbox.InvalidOptions, "memory_mb"),
    ({"max_output": 0}, sandbox.InvalidOptions, "max_output"),
    ({"backend": "chroot"}, sandbox.InvalidOptions, "chroot"),
    ({"workspace": "/no/such/dir"}, sandbox.InvalidOptions, "workspace"),
    ({"read": ["/no/such/path"]}, sandbox.InvalidOptions, "read"),
    ({"cwd": ".."}, sandbox.InvalidOptions, "cwd"),
] + [
    # The backend that confines nothing, off the trusted lane.
    ({"backend": b["name"]}, sandbox.PolicyRefused, b["name"])
    for b in report()["backends"] if b.get("unconfined")
])
def test_bad_input_raises_before_anything_runs(workspace, options, error, named):
    marker = os.path.join(workspace, "marker")
    kwargs = {"workspace": workspace, **options}
    with pytest.raises(error) as raised:
        sandbox.run(["touch", marker], **kwargs)
    assert isinstance(raised.value, sandbox.SandboxError)
    assert named in raised.value.reason, raised.value.reason
    assert raised.value.remedy
    assert not os.path.exists(marker), "the command ran"
    with pytest.raises(error):
        asyncio.run(sandbox.run_async(["touch", marker], **kwargs))
    assert not os.path.exists(marker), "the command ran"


@pytest.mark.parametrize("argv", ["touch marker", [], [1, 2]])
def test_argv_must_be_a_list_of_strings(workspace, argv):
    with pytest.raises(sandbox.InvalidOptions) as raised:
        sandbox.run(argv, workspace=workspace)
    assert "argv" in raised.value.reason
    assert not os.path.exists(os.path.join(workspace, "marker"))


def test_eight_threads_run_at_once(backend, workspace):
    # One alone first: what a command costs here, start-up included (a container's is
    # seconds on a loaded host).
    started = time.monotonic()
    assert sandbox.run(["sleep", "1"], workspace=workspace, **backend).code == 0
    alone = time.monotonic() - started
    results = [None] * 8

    def one(i):
        results[i] = sandbox.run(["sleep", "1"], workspace=workspace, **backend)

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert all(r is not None and r.code == 0 for r in results), results
    slowest = max(r.wall_time for r in results)
    # Eight one after another would take 8 times one alone: with the GIL released they
    # overlap. A generous bound, not a timing test: 6 s, or half the serial time where one
    # alone costs more than 1.5 s.
    bound = max(6.0, 4 * alone)
    assert elapsed < bound, (
        f"{elapsed:.2f} s for eight `sleep 1` (one alone {alone:.2f} s, slowest "
        f"{slowest:.2f} s)")


def test_doctor_reports_every_compiled_in_backend():
    report = sandbox.doctor()
    names = [b["name"] for b in report["backends"]]
    assert names == report["host"]["compiled_in"]
    assert "auto picks" in sandbox.doctor(text=True)
