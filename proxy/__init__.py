"""The tierproxy server: listeners, connection pairs, interceptors, remote reads, CLI."""
