"""The error `dflash-data prepare` reports for bad input: one message that names the file, the row and the field,
says what is wrong and how to fix it."""


class PrepareError(Exception):
    """Bad input or settings; the message is complete and is printed as it is (no traceback)."""


def preview(text, limit=60):
    """The start of a string for an error message, on one line."""
    text = str(text).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
