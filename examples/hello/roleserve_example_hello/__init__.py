"""roleserve-example-hello: an example third-party roleserve plugin."""
