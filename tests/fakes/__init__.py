"""Fakes and builders shared by the tests: one module each, named for what it stands in for.

Rules of this package:

- A fake stands in for one collaborator in the unit tests of one module. Integration tests
  run real servers and use no fake from here (an import-linter contract in pyproject.toml
  says which modules those are); they may use the builders.
- A builder makes a value the product reads (a segment's metadata, a record batch, a Kafka
  request or response body) and has no state of its own.
- Each module's docstring says what it fakes or builds and the rules it keeps; a fake keeps
  Kafka's rules where the code under test relies on them, and says where it does not.
- Nothing here imports a test module (``tests.unit``, ``tests.integration``): tests import
  the fakes, never the other way round, and no fake is written twice.
"""
