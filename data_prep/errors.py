"""The one exception type for mistakes a user can fix, and how every CLI reports it.

Bad input (a missing file, a broken archive, an unknown option, a value out of range)
raises `UserError`, or a subclass; `run_command` prints it as one line and exits with
status 2. Any other exception is a bug and keeps its traceback.
"""

import errno
import re
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
    except Exception as error:
        if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            print(f"error: cannot write {error.filename or 'a file'} ({error.strerror}): "
                  "choose a work folder you can write (--work-dir or NLPKIT_WORK_DIR), or "
                  "fix its permissions.", file=sys.stderr)
            return 2
        full = disk_full(error)
        if full is None:
            raise
        where = f" writing {full.filename}" if getattr(full, "filename", None) else ""
        print(f"error: no space left on the disk{where}: free some space (or point "
              "NLPKIT_WORK_DIR elsewhere), then rerun the same command; it picks up from "
              "its last checkpoint or cache entry.", file=sys.stderr)
        return 2


SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # NumPy's words for it


def disk_full(error):
    """The error in `error`'s chain that says the disk (or a database on it) is full, or
    None: an OSError with ENOSPC or EDQUOT, or the words h5py, SQLite and NumPy use."""
    while error is not None:
        if (isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)) \
                or "No space left on device" in str(error) \
                or "database or disk is full" in str(error) \
                or (isinstance(error, OSError) and SHORT_WRITE.search(str(error))):
            return error
        error = error.__cause__ or error.__context__
    return None
