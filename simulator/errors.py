"""An exception as the one line that moesim's errors print: its message with the newlines and
runs of spaces of the library that raised it collapsed, and its type's name unless it is one of
moesim's own ValueErrors."""


def one_line(error: BaseException) -> str:
    """`error` on one line; its type's name alone where it carries no message."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"
