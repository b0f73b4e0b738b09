"""KAI's node-order score scales (``pkg/scheduler/plugins/scores/scores.go``).

Node order = the sum of plugin scores, highest first, ties by node name. The scales are far apart so
the sum behaves like a lexicographic order: nominated node ≫ GPU sharing ≫ availability ≫ resource type
≫ placement strategy (binpack ≤ 9, spread ≤ 1).
"""

NOMINATED_NODE = 1e7
"""nominatednode plugin: the node a task was pipelined to in an earlier cycle."""

K8S_PLUGINS = 1e6
"""KAI ``scores.K8sPlugins``: weight of the podaffinity plugin's raw InterPodAffinity score (preferred terms)."""

TOPOLOGY = 1e5
"""topology plugin: a node's rank among the preferred-level domains (``floor(10 (k+1)/D)`` times this)."""

GPU_SHARING = 1e4
"""gpusharingorder plugin (GPU binpack only): the node has an existing shared GPU the fraction fits on."""

AVAILABILITY = 1e3
"""nodeavailability plugin: the task fits on idle resources (not only on releasing ones)."""

RESOURCE_TYPE = 10.0
"""resourcetype plugin: CPU-only task on a CPU-only node."""

MAX_HIGH_DENSITY = 9.0
"""nodeplacement binpack: the fullest node scores 9."""
