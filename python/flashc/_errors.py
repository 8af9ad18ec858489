"""FlashcError and the status check every layer uses (imports only _lib).

A separate module so that _core, cuda and torch share one exception type and
one check without importing each other.
"""

from . import _lib

__all__ = ["FlashcError", "check", "fail"]


class FlashcError(ValueError):
    """A flashc call failed. `.status` is the flashc_status value,
    `.status_name` its name ("FLASHC_ERR_SHAPE"), `.message` the library's
    message (str(e) is "FLASHC_ERR_SHAPE: <message>")."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _lib.flashc_status_string(self.status).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


def check(status):
    """Raise FlashcError with the library's message when status is not OK."""
    # The message is thread-local in the library; this runs on the calling
    # thread right after the call, so it is the call's own message.
    if status != _lib.FLASHC_OK:
        msg = _lib.flashc_last_error()
        raise FlashcError(status, msg.decode("utf-8", "replace") if msg else "")


def fail(status, message):
    """Raise FlashcError for an error found on the Python side."""
    raise FlashcError(status, message)
