"""The committed state as a command reads it: bad input without any run, a pre-log warehouse
adopted on the way, and (for the reading commands) a stale catalog made again from the log."""

from __future__ import annotations

from ...transforms.errors import InputError
from .catalog import refresh_catalog
from .legacy_catalog import adopt_legacy_catalog
from .warehouse import State, Warehouse


def committed_state(warehouse: Warehouse) -> State:
    """The committed state; without any run, that is bad input. A warehouse written before the
    log existed is adopted on the way."""
    if not warehouse.exists():
        if warehouse.remote or not warehouse.catalog_path.exists():
            raise InputError(f"{warehouse.name}: no warehouse here yet (run `retrieval-eval run` first)")
        adopt_legacy_catalog(warehouse)
    state = warehouse.state()
    if not state.runs:
        raise InputError(f"{warehouse.name}: the warehouse holds no runs yet (run `retrieval-eval run` first)")
    return state


def read_state(warehouse: Warehouse) -> State:
    """`committed_state`, for a command that reads the warehouse: on the way, a catalog that is
    missing, stale, moved or unreadable is made again from the log when no other process holds
    it open read-write (its parts are read by the log either way). A reader of a warehouse in
    a bucket writes nothing there: its writers put the catalog after each commit."""
    state = committed_state(warehouse)
    if not warehouse.remote:
        refresh_catalog(warehouse, state, announce=True, say_held=False)
    return state
