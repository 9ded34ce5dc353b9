"""In-memory fakes of every port, for the unit tests: ``store`` (the trigger store and what
it composes), ``queue``, and one module per other port group. Each keeps its real adapter's
contract: ``tests/contract/`` runs the same tests against the fake and the real one."""
