"""Speculative-decoding playground: a headless library for running, seeing and measuring
speculative decoding on a local draft/target model pair.

Importing this package loads no model and parses no arguments.
"""

__version__ = "0.1.0"
