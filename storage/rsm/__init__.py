"""Remote storage managers: where tiered segments live (S3 or a local directory)."""
