"""The embedded traffic engine (compiler, BPF interpreter, live runs), the GTP-U walker it uses, the backend."""
