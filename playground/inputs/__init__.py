"""What the user feeds the loop: prompt text (checked, encoded, split into token pieces) and the presets of
agent-style output shapes with their output checks.
"""
