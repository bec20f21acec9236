"""WireGuard cluster mesh between nodes: no workers yet.

It will keep a WireGuard interface whose peers are the other nodes of the
cluster, announcing this node's pod prefixes. Until then it runs nothing.
"""

ROLESERVE_PLUGIN_API = 1
