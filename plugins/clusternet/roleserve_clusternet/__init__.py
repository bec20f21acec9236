"""roleserve-clusternet: WireGuard cluster mesh."""
