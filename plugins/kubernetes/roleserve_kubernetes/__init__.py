"""roleserve-kubernetes: Kubernetes controller and worker launcher."""
