"""The one exception type for mistakes a user can fix, and how every CLI reports it.

Bad input (a missing file, a broken archive, an unknown option, a value out of range)
raises `UserError`, or a subclass; `run_command` prints it as one line and exits with
status 2. Any other exception is a bug and keeps its traceback.
"""

import errno
import sys


class UserError(Exception):
    """Something the user gave or asked for is wrong; the message says what to do."""


def run_command(main, argv=None):
    """`main(argv)`'s exit status; a `UserError` is one `error:` line and status 2, and
    so are a full disk (what to free, and that the command picks up where it stopped)
    and a file the command may not write."""
    try:
        return main(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            print(f"error: cannot write {error.filename or 'a file'} ({error.strerror}): "
                  "choose a work folder you can write (--work-dir or NLPKIT_WORK_DIR), or "
                  "fix its permissions.", file=sys.stderr)
            return 2
        if error.errno not in (errno.ENOSPC, errno.EDQUOT) \
                and "No space left on device" not in str(error):  # h5py says it in words
            raise
        where = f" writing {error.filename}" if error.filename else ""
        print(f"error: no space left on the disk{where}: free some space (or point "
              "NLPKIT_WORK_DIR elsewhere), then rerun the same command; it picks up from "
              "its last checkpoint or cache entry.", file=sys.stderr)
        return 2
