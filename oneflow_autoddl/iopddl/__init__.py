"""The ASPLOS/EuroSys 2025 IOPDDL contest's graphs (../shared/iopddl/README.md): reading and the
contest's evaluator (instance), the exact reductions that make one the search's factor graph and
memory items (reduce), and its solution by the project's search under the memory limit at every
time step (solve)."""
