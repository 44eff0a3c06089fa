"""Single-device ground truth: each program on one device, global batch.

Both ports are checked against these, not only against each other, since two
ports can make the same mistake.
"""
