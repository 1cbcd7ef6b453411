"""Argument checks shared by the layers' constructors."""


def require_positive_ints(**values):
    """Raises a ValueError naming the first argument that is not a positive int."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
