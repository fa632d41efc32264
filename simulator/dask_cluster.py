"""A Dask distributed client for the commands that run many simulations across machines
(`sweep`, `validate`, `calibrate` with `--scheduler ADDRESS`). The workers need moesim
installed; the scenarios travel to them whole, so files the inputs name are read here."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from simulator.errors import one_line

DASK_CONNECT_TIMEOUT_S = 10


def dask_client(address: str) -> Any:
    """A Dask client of the scheduler at `address` (a context manager: leaving it closes the
    client); a one-line error naming the address."""
    from distributed import Client
    from distributed.comm import get_address_host_port, parse_address
    from distributed.comm.registry import get_backend

    try:  # a bad address fails before a client exists (a half-made one hangs at exit)
        scheme = parse_address(address)[0]
        get_backend(scheme)
        if scheme != "inproc":
            get_address_host_port(address)
        return Client(address, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
    except (ValueError, OSError) as error:
        raise ValueError(f"scheduler {address!r}: {one_line(error)}") from None


def optional_dask_client(address: str | None) -> AbstractContextManager[Any]:
    """`dask_client(address)`, or, without an address, a context that gives None (run here)."""
    return dask_client(address) if address else nullcontext()
