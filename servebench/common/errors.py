"""The root of servebench's own errors.

Every error class servebench and its model zoo define derives from `ServebenchError`
(through its layer's own base, e.g. `ServerError`, `NetemError`, `InferenceError`), so a
caller that means "anything servebench refused or could not do, said in a sentence" catches
one class and lets Python's own bugs through. Classes keep the builtin they have always been
as a second base (`ValueError` for bad input, `RuntimeError` for a failure), so code that
catches those still works.
"""

from __future__ import annotations


class ServebenchError(Exception):
    """An error servebench raises on purpose, with a message meant for a person."""
