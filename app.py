"""python app.py: the speculative-decoding playground in the browser (http://127.0.0.1:7860).

Which pair it serves: PLAYGROUND_TARGET / PLAYGROUND_DRAFT / PLAYGROUND_DEVICE / PLAYGROUND_DTYPE
(defaults: the embedded model, its int8 copy as draft, auto device and dtype). Bind address and port:
GRADIO_SERVER_NAME (default 127.0.0.1) and GRADIO_SERVER_PORT. Limits (prompt length, new tokens, sweep
size, queue size): PLAYGROUND_MAX_* and PLAYGROUND_QUEUE_SIZE, see playground/limits.py.
"""

import sys

from playground.errors import PlaygroundError
from playground.ui import build_ui, launch

if __name__ == "__main__":
    try:
        demo = build_ui()
    except PlaygroundError as e:  # a bad setting (a limit that is not a number): say which, do not start
        sys.exit(f"error: {e}")
    launch(demo)
