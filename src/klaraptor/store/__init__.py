"""The SQLite store: typed records (records.py), the schema and its migrations (schema.py), and
the `Store` that reads and writes them (sqlite.py)."""

from klaraptor.store.connection import default_store_path
from klaraptor.store.records import (
    HISTORY_SOURCES,
    MEASUREMENT_STATUSES,
    BuildInfo,
    BuildRecord,
    CollectFacts,
    HistoryRow,
    KernelRecord,
    Measurement,
    StaticFeatures,
    StatModelRecord,
    TruthDecision,
)
from klaraptor.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from klaraptor.store.sqlite import Store

__all__ = [
    "APPLICATION_ID",
    "HISTORY_SOURCES",
    "MEASUREMENT_STATUSES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "BuildInfo",
    "BuildRecord",
    "CollectFacts",
    "HistoryRow",
    "KernelRecord",
    "Measurement",
    "StatModelRecord",
    "StaticFeatures",
    "Store",
    "TruthDecision",
    "default_store_path",
]
