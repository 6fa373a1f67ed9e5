"""The SQLite store: typed records (records.py), the schema and its migrations (schema.py), and
the `Store` that reads and writes them (sqlite.py)."""

from klaraptor.store import records
from klaraptor.store.connection import default_store_path
from klaraptor.store.records import *  # noqa: F403 - every typed record is the store's API
from klaraptor.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from klaraptor.store.sqlite import Store

__all__ = [
    *records.__all__,
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Store",
    "default_store_path",
]
