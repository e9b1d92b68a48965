"""Errors raised by the kernel backends."""


class KernelUnavailable(RuntimeError):
    """A backend cannot run here (no compiler, no Triton, build failure); the message
    says why, so callers can report the implementation as unavailable."""
