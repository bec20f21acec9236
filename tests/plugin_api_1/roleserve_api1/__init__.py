"""roleserve-api1: a third-party roleserve plugin written for plugin API 1, frozen."""
