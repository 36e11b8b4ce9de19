"""Error type raised for every misuse of the kernel-primitive API."""


class KernelError(ValueError):
    """A kernel was written, specialised, bound or interpreted incorrectly."""
