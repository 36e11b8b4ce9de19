"""The plugin API floor: what a plugin implements and receives (interfaces, graph IR, op rules, reference kernels),
errors, dtypes and configuration. Imports nothing of hwadapter above it."""
