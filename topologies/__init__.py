"""Hardware and wiring: GPU/NIC/switch catalog, topology graphs and named systems."""
