"""Ray plumbing at the bottom of the dependency graph: ``connect_ray`` (cluster/connection.py) and the generic
fan-out of independent items over Ray or local processes (cluster/fanout.py)."""
from cluster.connection import ClusterError, check_reachable, connect_ray, one_line

__all__ = ["ClusterError", "check_reachable", "connect_ray", "one_line"]
