"""Which backends the tests run on: every compiled-in backend that confines, once each.

A backend that does not work here is skipped with doctor's reason, unless
`SANDBOX_TEST_REQUIRE` names it (a comma-separated list, or `all`), as CI does: then it
is a failure. The docker cases use `SANDBOX_TEST_DOCKER_IMAGE`, or an image imported
from the host's static busybox by `sandbox/tests/busybox-image.sh` (as the Rust tests do)."""

import os
import shutil
import subprocess
import tempfile

import pytest

import sandbox

DOCKER_TAG = "sandbox-cli-test:busybox"
# The same script, and so the same image, as the command's Rust tests.
BUSYBOX_IMAGE = os.path.join(os.path.dirname(__file__), "..", "..", "sandbox", "tests",
                             "busybox-image.sh")


def required(backend):
    names = [n.strip() for n in os.environ.get("SANDBOX_TEST_REQUIRE", "").split(",")]
    return backend in names or "all" in names


def docker_image():
    image = os.environ.get("SANDBOX_TEST_DOCKER_IMAGE")
    if image:
        return image
    if shutil.which("docker"):
        subprocess.run(["sh", BUSYBOX_IMAGE, DOCKER_TAG], check=False, capture_output=True)
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
