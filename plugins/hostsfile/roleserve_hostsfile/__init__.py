"""roleserve-hostsfile: cluster name resolution through the hosts file."""
