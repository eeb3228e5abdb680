"""Which backends the tests run on: every compiled-in backend that confines, once each.

A backend that does not work here is skipped with doctor's reason, unless
`SANDBOX_TEST_REQUIRE` names it (a comma-separated list, `all`, or `unprivileged` for every
confining backend an ordinary user runs), as CI does: then it is a failure. A backend that
runs an image uses `SANDBOX_TEST_IMAGE`, or an image imported from the host's static
busybox by `sandbox/tests/busybox-image.sh` (as the Rust tests do)."""

import os
import shutil
import subprocess
import tempfile

import pytest

import sandbox

TEST_IMAGE_TAG = "sandbox-cli-test:busybox"
# The same script, and so the same image, as the command's Rust tests.
BUSYBOX_IMAGE = os.path.join(os.path.dirname(__file__), "..", "..", "sandbox", "tests",
                             "busybox-image.sh")


def required(entry):
    """Whether SANDBOX_TEST_REQUIRE makes doctor's `entry` (one backend) a failure when
    it does not work."""
    names = [n.strip() for n in os.environ.get("SANDBOX_TEST_REQUIRE", "").split(",")]
    unprivileged = entry.get("unprivileged") and not entry.get("unconfined")
    return entry["name"] in names or "all" in names or (
        "unprivileged" in names and unprivileged)


_IMAGE = None


def image_for_tests():
    """The image for a backend that runs one, built here once where none is named."""
    global _IMAGE
    if _IMAGE is None:
        _IMAGE = os.environ.get("SANDBOX_TEST_IMAGE") or TEST_IMAGE_TAG
        if _IMAGE == TEST_IMAGE_TAG:
            # Fails (and is left to doctor to report) where no engine runs.
            subprocess.run(["sh", BUSYBOX_IMAGE, TEST_IMAGE_TAG], check=False,
                           capture_output=True)
    return _IMAGE


_REPORT = None


def report():
    """doctor, once; again with the test image when a backend needs one."""
    global _REPORT
    if _REPORT is None:
        _REPORT = sandbox.doctor()
        if any(b["needs_image"] for b in _REPORT["backends"]):
            _REPORT = sandbox.doctor(image=image_for_tests())
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
        if required(entry):
            pytest.fail(f"backend {name} is required (SANDBOX_TEST_REQUIRE) but unavailable: {why}")
        pytest.skip(f"backend {name} does not work here: {why}")
    opts = {"backend": name, "lane": entry["lanes"][0]}
    if entry["needs_image"]:
        opts["image"] = image_for_tests()
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
