"""Which backends the tests run on: every compiled-in backend that confines, once each.

A backend that does not work here is skipped with doctor's reason, unless
`SANDBOX_TEST_REQUIRE` names it (a comma-separated list, or `all`), as CI does: then it
is a failure. The docker cases use `SANDBOX_TEST_DOCKER_IMAGE`, or an image imported
here from the host's static busybox (the same tag as the Rust tests')."""

import os
import shutil
import subprocess
import tempfile

import pytest

import sandbox

DOCKER_TAG = "sandbox-cli-test:busybox"


def required(backend):
    names = [n.strip() for n in os.environ.get("SANDBOX_TEST_REQUIRE", "").split(",")]
    return backend in names or "all" in names


def docker_image():
    image = os.environ.get("SANDBOX_TEST_DOCKER_IMAGE")
    if image:
        return image
    script = f"""set -e
    docker image inspect {DOCKER_TAG} >/dev/null 2>&1 && exit 0
    bb=$(command -v busybox)
    d=$(mktemp -d)
    trap 'rm -rf "$d"' EXIT
    mkdir -p "$d/bin" "$d/tmp" "$d/etc"
    chmod 1777 "$d/tmp"
    cp "$bb" "$d/bin/busybox"
    for a in $("$bb" --list); do
      [ "$a" = busybox ] || ln -s busybox "$d/bin/$a"
    done
    echo 'nobody:x:65534:65534:nobody:/:/bin/sh' > "$d/etc/passwd"
    tar -C "$d" -c . | docker import -c 'ENV PATH=/bin' - {DOCKER_TAG} >/dev/null"""
    if shutil.which("docker"):
        subprocess.run(["sh", "-c", script], check=False, capture_output=True)
    return DOCKER_TAG


_REPORT = None


def report():
    global _REPORT
    if _REPORT is None:
        _REPORT = sandbox.doctor(image=docker_image())
    return _REPORT


@pytest.fixture(params=report()["host"]["compiled_in"])
def backend(request):
    """A dict of the options that select this backend on the strictest lane it runs a
    default request on. The cases are about confinement: a backend whose capability does
    not confine writes (`none`) is skipped with that reason."""
    name = request.param
    entry = next(b for b in report()["backends"] if b["name"] == name)
    if entry.get("capability") and not entry["capability"]["confine_writes"]:
        pytest.skip(f"backend {name} does not confine writes (its capability)")
    if not entry["works"]:
        why = f"{entry.get('problem')}; remedy: {entry.get('remedy')}"
        if required(name):
            pytest.fail(f"backend {name} is required (SANDBOX_TEST_REQUIRE) but unavailable: {why}")
        pytest.skip(f"backend {name} does not work here: {why}")
    opts = {"backend": name, "lane": entry["lanes"][0]}
    if entry["needs_image"]:
        opts["image"] = docker_image()
    return opts


def capability(name):
    """What `name` enforces here, from doctor."""
    return next(b for b in report()["backends"] if b["name"] == name)["capability"]


@pytest.fixture
def workspace():
    """A directory an unprivileged uid running these tests can use too."""
    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
