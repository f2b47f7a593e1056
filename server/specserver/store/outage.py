"""What "the database cannot be reached" looks like, whichever driver said it: a lost
connection, a pool timeout, PostgreSQL restarting. Callers answer it with "try again later",
never as a bug."""

from __future__ import annotations

STORE_DOWN_RETRY_AFTER_S = 5.0


def store_down_errors() -> tuple[type[Exception], ...]:
    """Exception classes that mean "the database cannot be reached"."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    classes: list[type[Exception]] = [OperationalError, PoolTimeout]
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg comes with the server extra
        pass
    else:
        classes.append(psycopg.OperationalError)
    return tuple(classes)


def is_store_down(exc: BaseException) -> bool:
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, store_down_errors())
