"""Pure core of suanli: catalogue, fleet, requests, placement.

Standard library only; no I/O, clock or randomness (seeds, ids and time are arguments).
"""
