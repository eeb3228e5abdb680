"""The `sandbox` package as a Python program uses it, each effect checked from here."""

import asyncio
import json
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
        # What was enforced: rendered lines, and beside them the same record as data.
        notes, enforced = out.policy["notes"], out.policy["enforced"]
        assert enforced and len(notes) == len(enforced), out.policy
        assert all(isinstance(e["mechanism"], str) and isinstance(e["fact"], str)
                   for e in enforced), enforced
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


def test_a_toolchain_is_readable_and_only_when_granted(backend, workspace):
    home = tempfile.mkdtemp()
    try:
        os.chmod(home, 0o755)
        tool = os.path.join(home, "tool")
        with open(tool, "w") as f:
            f.write("toolchain-file\n")
        os.chmod(tool, 0o644)
        out = sandbox.run(["cat", tool], workspace=workspace, toolchains=[home], **backend)
        assert out.code == 0 and out.stdout == b"toolchain-file\n", out
        out = sandbox.run(["cat", tool], workspace=workspace, **backend)
        assert out.code != 0 and b"toolchain-file" not in out.stdout, out
    finally:
        import shutil
        shutil.rmtree(home, ignore_errors=True)


def test_a_secret_is_named_and_its_value_never_in_an_error(backend, workspace, monkeypatch):
    value = "value-that-must-not-leak-%d" % os.getpid()
    monkeypatch.setenv("RW_API_TOKEN", value)
    marker = os.path.join(workspace, "marker")
    try:
        out = sandbox.run(["touch", marker], workspace=workspace,
                          secrets=["RW_API_TOKEN@api.example.test"], **backend)
    except sandbox.SandboxError as e:
        # No backend carries secrets yet: refused before anything runs, by name only.
        assert value not in str(e) and value not in e.reason + e.remedy, e
        assert not os.path.exists(marker), "the command ran"
    else:
        assert value.encode() not in out.stdout + out.stderr, out


def test_request_rules_and_upstream_authorities_are_checked_before_anything_runs(backend, workspace):
    marker = os.path.join(workspace, "marker")
    bad = [
        ({"allow_requests": ["GET http://api.example.test/"]}, "allow_requests"),
        ({"allow_requests": ["FETCH https://api.example.test/"]}, "allow_requests"),
        ({"allow_hosts": ["api.example.test"], "upstream_ca": [os.path.join(workspace, "missing.pem")]},
         "upstream_cas"),
        ({"allow_hosts": ["api.example.test"], "upstream_proxy": "https://proxy.test:3128"},
         "upstream_proxy"),
        ({"allow_hosts": ["api.example.test"], "upstream_proxy": "http://u:p@proxy.test:3128"},
         "upstream_proxy"),
        ({"upstream_proxy": "http://proxy.test:3128"}, "upstream_proxy"),
    ]
    for options, field in bad:
        with pytest.raises(sandbox.SandboxError) as e:
            sandbox.run(["touch", marker], workspace=workspace, **options, **backend)
        assert field in str(e.value), (options, e.value)
        assert not os.path.exists(marker), ("the command ran", options)


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
    ({"toolchains": ["/no/such/toolchain"]}, sandbox.InvalidOptions, "toolchains"),
    ({"secrets": ["TOKEN"]}, sandbox.InvalidOptions, "secrets"),
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


# ---------------------------------------------------------------------------------------
# What the command line can set, the Python API can set too, checked by the same library.

def serve_once_per_connection(body):
    """A loopback HTTP server on the host answering every request with `body`; its port."""
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def loop():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(body), body))

    threading.Thread(target=loop, daemon=True).start()
    return server, server.getsockname()[1]


def host_programs(backend):
    """The host's programs (curl, python3) run in it: not a backend that runs an image."""
    return "image" not in backend


def test_a_mistyped_program_is_an_outcome_with_code_127(backend, workspace):
    out = sandbox.run(["definitely-not-a-program-xyz"], workspace=workspace, **backend)
    assert out.status == "exited" and out.code == 127 and out.exit_status == 127, out
    assert not out.ok
    assert b"definitely-not-a-program-xyz" in out.stderr and b"remedy" in out.stderr, out.stderr
    script = os.path.join(workspace, "script.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(script, 0o644)
    out = sandbox.run(["./script.sh"], workspace=workspace, **backend)
    assert out.code == 126 and out.exit_status == 126, out
    out = asyncio.run(sandbox.run_async(["definitely-not-a-program-xyz"], workspace=workspace,
                                        **backend))
    assert out.code == 127, out
    # Nothing runs, so there is nothing to kill.
    process = sandbox.start(["definitely-not-a-program-xyz"], workspace=workspace, **backend)
    process.kill()
    assert process.done and process.wait().code == 127


def test_network_proxy_names_the_argument_it_needs(workspace):
    with pytest.raises(sandbox.InvalidOptions) as raised:
        sandbox.run(["true"], workspace=workspace, network="proxy")
    assert "allow_hosts" in raised.value.reason + raised.value.remedy, raised.value
    # ...which is an argument of the API.
    assert "allow_hosts" in sandbox.start.__text_signature__


@pytest.mark.parametrize("options, named", [
    ({"allow_hosts": ["*.com"]}, "allow_hosts"),
    ({"allow_hosts": ["crates.io"], "network": "full"}, "allow_hosts"),
    ({"host_ports": [5432], "network": "none"}, "host_ports"),
    ({"publish": [0]}, "publish"),
    ({"publish": ["80:x"]}, "publish"),
    ({"publish": [1.5]}, "publish"),
    ({"changes": "keep"}, "changes"),
])
def test_bad_network_and_changes_options_raise_before_anything_runs(workspace, options, named):
    marker = os.path.join(workspace, "marker")
    with pytest.raises(sandbox.InvalidOptions) as raised:
        sandbox.run(["touch", marker], workspace=workspace, **options)
    assert named in raised.value.reason, raised.value.reason
    assert not os.path.exists(marker)


def test_allow_hosts_reach_the_allowlist_and_the_attempts_are_recorded(backend, workspace):
    server, port = serve_once_per_connection(b"hello-py")
    allow = f"127.0.0.0/8:{port}"
    # `--noproxy ''`: the sandbox's NO_PROXY keeps 127.0.0.1 direct; here the loopback
    # address stands in for a remote host.
    script = (f"curl -sS --noproxy '' http://127.0.0.1:{port}/; "
              "curl -sS --noproxy '' http://127.0.0.1:1/ >/dev/null 2>&1; exit 0")
    name = backend["backend"]
    try:
        if capability(name)["network_proxy"]["kind"] != "exact":
            with pytest.raises(sandbox.PolicyRefused):
                sandbox.run(["sh", "-c", script], workspace=workspace, allow_hosts=[allow],
                            **backend)
            return
        if not host_programs(backend):
            pytest.skip(f"backend {name} runs an image without curl")
        # No network named: an allowlist means the proxy, as on the command line.
        out = sandbox.run(["sh", "-c", script], workspace=workspace, allow_hosts=[allow],
                          **backend)
        assert out.code == 0 and out.stdout == b"hello-py", out
        assert out.policy["network"] == "proxy"
        entries = out.connections["entries"]
        assert [e["decision"] for e in entries] == ["allowed", "denied"], entries
        assert entries[0]["rule"] == allow and entries[1]["port"] == 1, entries
        assert isinstance(out.denials["entries"], list)
    finally:
        server.close()


def test_host_ports_reach_the_hosts_loopback_port(backend, workspace):
    server, port = serve_once_per_connection(b"from-host")
    name = backend["backend"]
    argv = ["curl", "-sS", "--noproxy", "*", f"http://127.0.0.1:{port}/"]
    try:
        if not capability(name)["host_ports"]:
            with pytest.raises(sandbox.PolicyRefused):
                sandbox.run(argv, workspace=workspace, host_ports=[port], **backend)
            return
        if not host_programs(backend):
            pytest.skip(f"backend {name} runs an image without curl")
        out = sandbox.run(argv, workspace=workspace, host_ports=[port], **backend)
        assert out.code == 0 and out.stdout == b"from-host", out
        assert out.policy["network"] == "loopback"
        # Without it, the same port is out of reach: the command's loopback is its own.
        out = sandbox.run(argv, workspace=workspace, network="loopback", **backend)
        assert out.code != 0 and out.stdout == b"", out
    finally:
        server.close()


def test_publish_reaches_the_commands_server_from_the_host(backend, workspace):
    import socket
    import urllib.request
    name = backend["backend"]
    with open(os.path.join(workspace, "index.html"), "w") as f:
        f.write("served-inside")
    argv = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]
    if not capability(name)["publish"]:
        with pytest.raises(sandbox.PolicyRefused):
            sandbox.run(argv, workspace=workspace, publish=[8000], **backend)
        return
    if not host_programs(backend):
        pytest.skip(f"backend {name} runs an image without python")
    # A free host port, named as "PORT:HOSTPORT".
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    host_port = probe.getsockname()[1]
    probe.close()
    process = sandbox.start(argv, workspace=workspace, publish=[f"8000:{host_port}"],
                            timeout=60, **backend)
    try:
        deadline = time.monotonic() + 30
        while 8000 not in process.published:
            assert time.monotonic() < deadline and not process.done, "never published"
            time.sleep(0.05)
        assert process.published[8000] == f"127.0.0.1:{host_port}", process.published
        body = None
        while body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{host_port}/index.html",
                                            timeout=5) as r:
                    body = r.read()
            except OSError:
                assert time.monotonic() < deadline and not process.done, "never served"
                time.sleep(0.1)
        assert body == b"served-inside"
    finally:
        process.kill()
    assert process.wait().status == "killed"


def test_changes_are_reviewed_then_applied_or_discarded(backend, workspace):
    made = os.path.join(workspace, "made")
    argv = ["sh", "-c", "echo new > made"]
    out = sandbox.run(argv, workspace=workspace, changes="review", **backend)
    assert out.code == 0, out
    assert not os.path.exists(made), "the command wrote the workspace itself"
    assert "made" in json.dumps(out.changes), out.changes
    report = out.apply_changes()
    assert report["written"] == 1, report
    with open(made) as f:
        assert f.read() == "new\n"
    os.remove(made)
    out = sandbox.run(argv, workspace=workspace, changes="review", **backend)
    out.discard_changes()
    with pytest.raises(sandbox.SandboxError):
        out.apply_changes()
    assert not os.path.exists(made)
    for options in ({"changes": "discard"}, {"snapshot": True}):
        out = sandbox.run(argv, workspace=workspace, **options, **backend)
        assert out.code == 0 and out.changes is None, out
        assert not os.path.exists(made), options
    out = sandbox.run(argv, workspace=workspace, **backend)
    with pytest.raises(sandbox.InvalidOptions):
        out.apply_changes()
    assert os.path.exists(made), "without changes the command writes the workspace"
