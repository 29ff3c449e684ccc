"""The analyses' own user errors, in a module of their own: the command line catches them
without importing the analyses (and pandas behind the sweep) that raise them."""


class CompareError(ValueError):
    """A comparison that cannot start (no schedule, an unknown one); one line."""


class SweepError(ValueError):
    """A grid that cannot be swept (bad syntax, a repeated key); one line."""


__all__ = ["CompareError", "SweepError"]
