"""roleserve-controlplane: etcd consensus and the curator, the cluster's control plane."""
