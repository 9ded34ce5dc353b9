"""The HTTP layer (aiohttp): parsing, routes, views. Only the API process imports it."""
