"""Trace a user's nn.Graph into a Job file, for `python -m oneflow_autoddl plan --job FILE`.

Run it on one rank (plain `python`); the planner then moves the Job onto any mesh
(oneflow_autoddl.remesh) and plans it for any cluster, no GPUs needed.
"""

import oneflow as flow


def save_job(graph: "flow.nn.Graph", *args, path: str, **kwargs) -> int:
    """Trace `graph` on these inputs (build_graph only, nothing runs) and write its Job to `path`.

    Returns the number of ops. The graph cannot be compiled afterwards: trace a fresh one.
    """
    job, _ = graph.build_graph(*args, **kwargs)
    with open(path, "wb") as f:
        f.write(job.SerializeToString())
    return len(job.net.op)
