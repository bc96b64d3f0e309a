"""One exception type for every input the playground refuses, with a message meant for a person."""


class PlaygroundError(ValueError):
    """Bad input or an unusable configuration: the message says what and how to fix it."""
