"""The chaos suite: ``python -m bench.chaos`` (see ``__main__``)."""
