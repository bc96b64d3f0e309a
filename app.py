"""python app.py: the speculative-decoding playground in the browser (http://127.0.0.1:7860).

Which pair it serves: PLAYGROUND_TARGET / PLAYGROUND_DRAFT / PLAYGROUND_DEVICE / PLAYGROUND_DTYPE
(defaults: the embedded model, its int8 copy as draft, auto device and dtype). Bind address and port:
GRADIO_SERVER_NAME (default 127.0.0.1) and GRADIO_SERVER_PORT.
"""

from playground.ui import build_ui, launch

if __name__ == "__main__":
    launch(build_ui())
