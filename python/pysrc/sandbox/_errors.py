"""The exceptions of the `sandbox` package: each carries the reason and the remedy."""


class SandboxError(Exception):
    """The sandbox could not do what was asked. `reason` says why, `remedy` what to do."""

    def __init__(self, reason: str, remedy: str):
        super().__init__(f"{reason}; remedy: {remedy}")
        self.reason = reason
        self.remedy = remedy


class InvalidOptions(SandboxError, ValueError):
    """An argument is wrong; nothing was started."""


class SandboxUnavailable(SandboxError):
    """The backend cannot work on this host (missing tool, kernel feature, permission)."""


class PolicyRefused(SandboxError):
    """The backend cannot enforce what was asked on the chosen lane; nothing was started."""
