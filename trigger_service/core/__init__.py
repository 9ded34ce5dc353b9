"""The pure core: the model, time arithmetic, errors and the ports. No I/O, no drivers.

Everything else depends on this package; it depends on nothing of ours but itself.
"""
