"""The one exception type for mistakes a user can fix, and how every CLI reports it.

Bad input (a missing file, a broken archive, an unknown option, a value out of range)
raises `UserError`, or a subclass; `run_command` prints it as one line and exits with
status 2. Any other exception is a bug and keeps its traceback.
"""

import sys


class UserError(Exception):
    """Something the user gave or asked for is wrong; the message says what to do."""


def run_command(main, argv=None):
    """`main(argv)`'s exit status; a `UserError` is one `error:` line and status 2."""
    try:
        return main(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
