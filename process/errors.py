"""The one exception type for mistakes a user can fix (`UserError`), and how every
command reports it and the few outside failures a user can also fix (a full disk, a
folder or tracking store it may not write): one `error:` line, exit status 2. A failure
that keeps finished work (`KeptWorkError`) is one line too, with status 1."""

import errno
import re
import sys


class UserError(Exception):
    """Something the user gave or asked for is wrong; the message says what to do."""


class KeptWorkError(Exception):
    """A failure after work that is kept (a finished training whose export failed): one
    `error:` line saying what is kept and how to go on, exit status 1."""


def run_command(main, argv=None):
    """`main(argv)`'s exit status; a `UserError` is one `error:` line and status 2, and
    so are a full disk (what to free, and that the command picks up where it stopped)
    and a file the command may not write."""
    try:
        return main(argv)
    except (UserError, KeptWorkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, UserError) else 1
    except Exception as error:
        if not_writable(error):
            print(f"error: cannot write {error.filename or 'a file'} ({error.strerror}): "
                  "choose a work folder you can write (--work-dir or NLPKIT_WORK_DIR), or "
                  "fix its permissions.", file=sys.stderr)
            return 2
        if read_only_store(error):
            print("error: the tracking store is read-only (attempt to write a readonly "
                  "database): make its file and folder writable, or set MLFLOW_TRACKING_URI "
                  "to a store you can write; reading commands (compare) work as they are.",
                  file=sys.stderr)
            return 2
        full = disk_full(error)
        if full is None:
            raise
        if "database or disk is full" in str(full):  # the tracking store's disk
            print("error: the disk under the tracking store is full: free some space there "
                  "(or set MLFLOW_TRACKING_URI to a store on another disk), then rerun the "
                  "same command; a training picks up from its last checkpoint.",
                  file=sys.stderr)
            return 2
        where = f" writing {full.filename}" if getattr(full, "filename", None) else ""
        print(f"error: no space left on the disk{where}: free some space (or point "
              "NLPKIT_WORK_DIR elsewhere), then rerun the same command; it picks up from "
              "its last checkpoint or cache entry.", file=sys.stderr)
        return 2


def reported_in_one_line(error):
    """Whether `run_command` reports `error` in a line of its own: a `UserError`, a full
    disk, a store or a file it may not write."""
    return isinstance(error, (UserError, KeptWorkError)) or disk_full(error) is not None \
        or read_only_store(error) or not_writable(error)


def not_writable(error):
    """Whether `error` is a file or folder the command may not write."""
    return isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EROFS,
                                                           errno.EPERM)


def read_only_store(error):
    """Whether SQLite, somewhere in `error`'s chain, refused to write its database."""
    while error is not None:
        if "attempt to write a readonly database" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


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
