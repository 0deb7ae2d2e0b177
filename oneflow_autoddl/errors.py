"""The errors a user can act on. Every one says what is wrong and what to change.

`AutoDDLError` is their one base: the CLI reports it as a user error and exits 2; anything
else that escapes is a bug in this package and keeps its traceback. It derives from
ValueError, so code that caught ValueError before keeps working.
"""


class AutoDDLError(ValueError):
    """Bad input or a request the planner cannot meet; the message says what to change."""


class ConfigError(AutoDDLError):
    """An argument or setting out of its range (a mesh, an SBP, a model size, a graph setting)."""


class GraphError(AutoDDLError):
    """A graph the planner cannot read: the message says what is wrong and where."""


class ClusterError(AutoDDLError):
    """A cluster file or a mesh that does not fit it; the message names the field or mismatch."""


class PlanningError(AutoDDLError):
    """The graph cannot be planned as asked; the message says what to change."""


class PlanMismatch(AutoDDLError):
    """A saved plan that does not fit the graph; the message names the first difference."""


class InvalidPlan(AutoDDLError):
    """A plan signature OneFlow would not accept; the message names the op."""
