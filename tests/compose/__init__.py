"""The docker-compose stack, built without a registry and run for real (``make compose-test``)."""
