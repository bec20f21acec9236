"""roleserve-hostsfile: Cluster name resolution and the saved cluster directory."""
