"""TRex: its runtime, a real server, the namespace lab with TRex as generator, the profiles."""
