"""Remote tier: storage managers, segment format, remote log metadata, caches, tiering."""
