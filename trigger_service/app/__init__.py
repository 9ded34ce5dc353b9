"""Use cases, without HTTP: what the API does, in terms of the core's ports."""
