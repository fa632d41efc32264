"""The hub: costs, network, engine, memory, metrics, scenarios and the command line."""
