"""roleserve-hostsfile: Cluster name resolution."""
