"""Generated protobuf code of the kubernetes plugin: ``cri`` (the CRI subset it calls)."""
