"""The vLLM server side: start and stop a server in its own virtual environment (``server``), with the flags
RL needs (``launch``), its worker extension that reloads weights in place (``worker``, imported by the
server process), the client's weight routes that push new weights into it (``weights``), and the LoRA
adapter routes that push a LoRA run's adapter alone (``adapters``)."""
